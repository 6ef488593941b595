// Q4_0 blocks (32 elements: f16 d, 16 bytes of nibbles: low = element j, high = j + 16;
// value (q - 8) * d). Row sections: qs (16 bytes per block), d (2).
//! replaces: matvec_body matvec_q_body
//! replaces: matmul_load_float matmul_load_q
//! replaces: matvec_batch_cmt_f16 matvec_batch_cmt_q
//! include: quant_common
const QBLOCK: u32 = 32u;
const QUNIT: u32 = 32u;

fn q_xv4(u: u32, k: u32) -> u32 { return u * 8u + k; }

// A unit's raw words and their dot with x: q_dot's halves (include/quant_common.wgsl).
struct QU { q: vec4<u32>, d: vec4<u32> }

fn q_load(sel: bool, rb: u32, nb: u32, u: u32) -> QU {
    return QU(wraw(sel, rb + u), wvec(sel, rb, nb * 16u + 2u * u));
}

fn q_raw_dot(r: QU, nb: u32, u: u32, xs: ptr<function, array<vec4<f32>, 16>>) -> f32 {
    let q = r.q;
    var s = 0.0;
    for (var k = 0u; k < 4u; k++) {
        s += dot(lo4b(q[k], 8.0), (*xs)[k]) + dot(hi4b(q[k], 8.0), (*xs)[k + 4u]);
    }
    return s * vhalf(r.d, nb * 16u + 2u * u);
}

// Elements 8 * c8 .. + 7 of the row: low nibbles of 8 bytes for the first half of a
// block, high nibbles for the second.
fn q_fetch8(sel: bool, rb: u32, nb: u32, c8: u32) -> QRaw {
    return q16_fetch8(sel, rb, nb, c8, 2u);
}
fn q_decode8(r: QRaw, nb: u32, c8: u32) -> W8 {
    let b = c8 / 4u;
    let o = 2u * (c8 % 2u);
    let qp = vpair(r.q, o);
    let d = vhalf(r.m, nb * 16u + 2u * b);
    let hi = c8 % 4u >= 2u;
    return W8(u2fb(nibbles(qp.x, hi), 8.0) * d, u2fb(nibbles(qp.y, hi), 8.0) * d);
}
