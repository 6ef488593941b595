// Q6_K weights in matvec_batch_cmr (include/matvec_batch_cmr_body.wgsl; swapped in for
// _runs.wgsl by that dtype snippet): chunks of KC = 64 columns; a weight group is 32
// weights that one fetch of the snippet's vec4s holds (`q_gfetch`), decoded together
// (`q_gdecode`) and staged as 4 runs of 8 whose columns the snippet's `q_c8` names (not
// consecutive: a Q6_K group is the low or high nibbles of 16 ql bytes). The activations
// are staged in the same order, so a chunk's K order is the format's, and a row's sum
// covers every column once. Against 8 weights per fetch over 32-column chunks
// (include/matvec_batch_cmr_runs.wgsl): Q6_K and Q5_K 1.1-1.6x faster, Q4_0 .. Q5_1, Q4_K
// and Q8_0 up to 1.3x slower (H100, BENCHMARKS.md, thirteenth session); against 16 weights
// per fetch over 32 columns (include/matvec_batch_cmr_q16.wgsl, which Q4_K and Q5_K take),
// Q6_K here keeps the 4B Q4_K_M batched engine ~3% faster (twentieth session). `WRaw` is
// QRaw (include/matvec_batch_cmt_q.wgsl, also included).
const KC: u32 = 64u;
const WR: u32 = 4u;

// Group g (0 .. KC / 32) of chunk ch of row r of the first matrix (sel: the second);
// zeros past cols or rows (which decode to zeros).
fn fetch_wg(sel: bool, r: u32, ch: u32, g: u32) -> QRaw {
    let gi = ch * (KC / 32u) + g;
    if (32u * gi >= pc.cols || r >= pc.rows) {
        return qraw_zero();
    }
    return q_gfetch(sel, r * pc.w_stride, pc.cols / QBLOCK, gi);
}

fn put_wg(o: u32, v: QRaw, ch: u32, g: u32) {
    let d = q_gdecode(v, pc.cols / QBLOCK, ch * (KC / 32u) + g);
    put8(o, vec4<f16>(d.r0.a), vec4<f16>(d.r0.b));
    put8(o + 8u, vec4<f16>(d.r1.a), vec4<f16>(d.r1.b));
    put8(o + 16u, vec4<f16>(d.r2.a), vec4<f16>(d.r2.b));
    put8(o + 24u, vec4<f16>(d.r3.a), vec4<f16>(d.r3.b));
}

// The column of stage run p (8 weights) of chunk ch.
fn run_col(ch: u32, p: u32) -> u32 {
    return 8u * q_c8(ch * (KC / 32u) + p / 4u, p % 4u);
}
