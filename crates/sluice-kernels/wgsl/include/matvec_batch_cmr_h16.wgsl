// K-quant weights decoded straight to f16 in matvec_batch_cmr
// (include/matvec_batch_cmr_body.wgsl; swapped in for _runs.wgsl by dtype/q4_k.wgsl,
// q5_k.wgsl, q6_k.wgsl, which also swap the kernels' include h16_dec for their decoder
// include/h16_<format>.wgsl): chunks of KC = 32 columns, a group is the 16 consecutive
// weights of one 8-weight fetch (`fetch_w` of its first run,
// include/matvec_batch_cmt_q.wgsl), decoded straight to f16 pairs (`q_decode16h`: packed
// integer-to-half tricks and packed fmas, no f32 per weight and no f32 -> f16
// conversion), which leaves each 4 consecutive columns in the order 0, 2, 1, 3; the
// activations are staged in the same order (from their f16 pairs, without the f32 round
// trip of `put`), so a row's sum covers the same products in an order fixed by the shape.
// One fetch serves 16 weights (q_fetch8 of an even c8 holds what c8 + 1 needs: one quant
// vec4 and its block's scales): half the loads and scale decodes of two 8-weight reads
// (Q4_K 4B gate/up 105 -> 81 us on the H100, twentieth session); the f16 decode took it
// to 76, Q5_K 102 -> 86 and Q6_K 100 -> 92 on an H200 (BENCHMARKS.md, twenty-first and
// twenty-second sessions).
const KC: u32 = 32u;
const WR: u32 = 2u;

// Group g (0 .. KC / 16) of chunk ch of row r of the first matrix (sel: the second): the
// 8-weight reader's fetch of its first run (zeros past cols or rows).
fn fetch_wg(sel: bool, r: u32, ch: u32, g: u32) -> QRaw {
    return fetch_w(sel, r, run_col(ch, 2u * g));
}

// Group g of chunk ch of row r, `prev` holding its group of chunk ch - 1: the fields
// that stay the same through a block (scales) are kept from `prev` unless chunk ch starts
// a block (the dtype snippet's q_fetch8_next).
fn fetch_wg_next(sel: bool, r: u32, ch: u32, g: u32, prev: QRaw) -> QRaw {
    let c = run_col(ch, 2u * g);
    if (c >= pc.cols || r >= pc.rows) {
        return qraw_zero();
    }
    let same = (ch * KC) % QBLOCK != 0u;
    return q_fetch8_next(sel, r * pc.w_stride, pc.cols / QBLOCK, c / 8u, prev, same);
}

// The first column of stage run p (8 weights) of chunk ch.
fn run_col(ch: u32, p: u32) -> u32 {
    return ch * KC + 8u * p;
}

// Group g of chunk ch (raw v) to stage[o ..] as f16, in stage order.
fn put_wg(o: u32, v: QRaw, ch: u32, g: u32) {
    let d = q_decode16h(v, pc.cols / QBLOCK, run_col(ch, 2u * g) / 8u);
    put8(o, d.a, d.b);
    put8(o + 8u, d.c, d.d);
}

// An activation run (8 halves packed in v) at half o of the stage, in the weights' order.
fn put_x(o: u32, v: vec4<u32>) {
    let a = h2_bits(v.x);
    let b = h2_bits(v.y);
    let c = h2_bits(v.z);
    let e = h2_bits(v.w);
    put8(o, vec4<f16>(a.x, b.x, a.y, b.y), vec4<f16>(c.x, e.x, c.y, e.y));
}
