// Q5_1 blocks (32 elements: f16 d, f16 m, u32 qh, 16 bytes of nibbles; value q * d + m).
// Row sections: qs (16 bytes per block), qh (4), d|m (4).
//! replaces: matvec_body matvec_q_body
//! replaces: matmul_load_float matmul_load_q
//! replaces: matvec_batch_cmt_f16 matvec_batch_cmt_q
//! include: quant_common
const QBLOCK: u32 = 32u;
const QUNIT: u32 = 32u;

fn q_xv4(u: u32, k: u32) -> u32 { return u * 8u + k; }

// A unit's raw words and their dot with x: q_dot's halves (include/quant_common.wgsl).
struct QU { q: vec4<u32>, qh: vec4<u32>, dm: vec4<u32> }

fn q_load(sel: bool, rb: u32, nb: u32, u: u32) -> QU {
    return QU(wraw(sel, rb + u), wvec(sel, rb, nb * 16u + 4u * u), wvec(sel, rb, nb * 20u + 4u * u));
}

fn q_raw_dot(r: QU, nb: u32, u: u32, xs: ptr<function, array<vec4<f32>, 16>>) -> f32 {
    let q = r.q;
    let qh = vword(r.qh, nb * 16u + 4u * u);
    var s = 0.0;
    var sx = vec4<f32>(0.0);
    for (var k = 0u; k < 4u; k++) {
        s += dot(u2fb(nibbles(q[k], false) | qh16(qh, k), 0.0), (*xs)[k])
            + dot(u2fb(nibbles(q[k], true) | qh16(qh, k + 4u), 0.0), (*xs)[k + 4u]);
        sx += (*xs)[k] + (*xs)[k + 4u];
    }
    let dm = unpack2x16float(vword(r.dm, nb * 20u + 4u * u));
    return s * dm.x + dot(sx, vec4<f32>(1.0)) * dm.y;
}

// Elements 8 * c8 .. + 7 of the row (nibbles as Q4_1, fifth bits from qh).
fn q_fetch8(sel: bool, rb: u32, nb: u32, c8: u32) -> QRaw {
    var r = q16_fetch8(sel, rb, nb, c8, 4u);
    r.e = wvec(sel, rb, nb * 20u + 4u * (c8 / 4u));
    return r;
}
fn q_decode8(r: QRaw, nb: u32, c8: u32) -> W8 {
    let q = q5_bits8(r, nb, c8);
    let dm = unpack2x16float(vword(r.e, nb * 20u + 4u * (c8 / 4u)));
    return W8(u2fb(q.a, 0.0) * dm.x + dm.y, u2fb(q.b, 0.0) * dm.x + dm.y);
}
