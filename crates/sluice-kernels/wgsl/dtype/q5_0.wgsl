// Q5_0 blocks (32 elements: f16 d, u32 qh (bit j = fifth bit of element j), 16 bytes of
// nibbles: low = element j, high = j + 16; value (q - 16) * d). Row sections: qs (16
// bytes per block), qh (4), d (2).
//! replaces: matvec_body matvec_q_body
//! replaces: matmul_load_float matmul_load_q
//! replaces: matvec_batch_cmt_f16 matvec_batch_cmt_q
//! include: quant_common
const QBLOCK: u32 = 32u;
const QUNIT: u32 = 32u;

fn q_xv4(u: u32, k: u32) -> u32 { return u * 8u + k; }

// A unit's raw words and their dot with x: q_dot's halves (include/quant_common.wgsl).
struct QU { q: vec4<u32>, qh: vec4<u32>, d: vec4<u32> }

fn q_load(sel: bool, rb: u32, nb: u32, u: u32) -> QU {
    return QU(wraw(sel, rb + u), wvec(sel, rb, nb * 16u + 4u * u), wvec(sel, rb, nb * 20u + 2u * u));
}

fn q_raw_dot(r: QU, nb: u32, u: u32, xs: ptr<function, array<vec4<f32>, 16>>) -> f32 {
    let q = r.q;
    let qh = vword(r.qh, nb * 16u + 4u * u);
    var s = 0.0;
    for (var k = 0u; k < 4u; k++) {
        s += dot(u2fb(nibbles(q[k], false) | qh16(qh, k), 16.0), (*xs)[k])
            + dot(u2fb(nibbles(q[k], true) | qh16(qh, k + 4u), 16.0), (*xs)[k + 4u]);
    }
    return s * vhalf(r.d, nb * 20u + 2u * u);
}

// Elements 8 * c8 .. + 7 of the row (nibbles as Q4_0, fifth bits from qh).
fn q_fetch8(sel: bool, rb: u32, nb: u32, c8: u32) -> QRaw {
    var r = q16_fetch8(sel, rb, nb, c8, 4u);
    r.e = wvec(sel, rb, nb * 20u + 2u * (c8 / 4u));
    return r;
}
fn q_decode8(r: QRaw, nb: u32, c8: u32) -> W8 {
    let q = q5_bits8(r, nb, c8);
    let d = vhalf(r.e, nb * 20u + 2u * (c8 / 4u));
    return W8(u2fb(q.a, 16.0) * d, u2fb(q.b, 16.0) * d);
}
