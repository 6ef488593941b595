//! include: matvec_batch_cmr_g16
// Q5_K and Q6_K weights in matvec_batch_cmr
// (include/matvec_batch_cmr_body.wgsl; swapped in for _runs.wgsl by those dtype
// snippets): chunks of KC = 32 columns; a weight group is 16 consecutive weights, both
// runs of 8 from ONE fetch of the snippet's vec4s (q_fetch8 of an even c8 holds what
// c8 + 1 needs too: one quant vec4 and its block's scales in every format) decoded by the
// snippet's q_decode16, so a group costs half the vec4 loads and scale decodes of two
// 8-weight reads (include/matvec_batch_cmr_runs.wgsl, which f16 and the 32-element block
// formats keep). The same columns in the same order (a chunk's stage is column
// ch * KC + i). On the H100 at 32 tokens (BENCHMARKS.md, twentieth session): Q4_K 4B
// gate/up 105 -> 81 us, down 62 -> 58; Q5_K (before: 32 weights per fetch over 64
// columns) gate/up 138 -> 99, down 82 -> 65, the 4B o 35 -> 38; with two q_decode8
// instead of q_decode16 3-10% slower; Q8_0 and Q4_0 within -2 .. +4%. Q6_K (before: 32
// weights per fetch over 64 columns; twenty-first session): 4B gate/up 117 -> 97 us,
// down 79 -> 65, qkv 49 -> 44, 0.6B LM head 239 -> 220 (the 4B o 34 -> 38); with two
// q_decode8 it had lost. Q4_K (here in the twentieth session) is decoded
// straight to f16 pairs since the twenty-first (include/matvec_batch_cmr_h16.wgsl). KC,
// WR, `fetch_wg` and `run_col`: include/matvec_batch_cmr_g16.wgsl.

fn put_wg(o: u32, v: QRaw, ch: u32, g: u32) {
    let d = q_decode16(v, pc.cols / QBLOCK, run_col(ch, 2u * g) / 8u);
    put8(o, vec4<f16>(d.r0.a), vec4<f16>(d.r0.b));
    put8(o + 8u, vec4<f16>(d.r1.a), vec4<f16>(d.r1.b));
}

// An activation run (8 halves packed in v) at half o of the stage (column order).
fn put_x(o: u32, v: vec4<u32>) {
    put(o, v);
}
