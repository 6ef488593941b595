// Q4_1 blocks (32 elements: f16 d, f16 m, 16 bytes of nibbles: low = element j, high =
// j + 16; value q * d + m). Row sections: qs (16 bytes per block), d|m (4).
//! replaces: matvec_body matvec_q_body
//! replaces: matmul_load_float matmul_load_q
//! replaces: matvec_batch_cmt_f16 matvec_batch_cmt_q
//! include: quant_common
const QBLOCK: u32 = 32u;
const QUNIT: u32 = 32u;

fn q_xv4(u: u32, k: u32) -> u32 { return u * 8u + k; }

// A unit's raw words and their dot with x: q_dot's halves (include/quant_common.wgsl).
struct QU { q: vec4<u32>, dm: vec4<u32> }

fn q_load(sel: bool, rb: u32, nb: u32, u: u32) -> QU {
    return QU(wraw(sel, rb + u), wvec(sel, rb, nb * 16u + 4u * u));
}

fn q_raw_dot(r: QU, nb: u32, u: u32, xs: ptr<function, array<vec4<f32>, 16>>) -> f32 {
    let q = r.q;
    var s = 0.0;
    var sx = vec4<f32>(0.0);
    for (var k = 0u; k < 4u; k++) {
        s += dot(lo4(q[k]), (*xs)[k]) + dot(hi4(q[k]), (*xs)[k + 4u]);
        sx += (*xs)[k] + (*xs)[k + 4u];
    }
    let dm = unpack2x16float(vword(r.dm, nb * 16u + 4u * u));
    return s * dm.x + dot(sx, vec4<f32>(1.0)) * dm.y;
}

// Elements 8 * c8 .. + 7 of the row (nibbles as Q4_0).
fn q_fetch8(sel: bool, rb: u32, nb: u32, c8: u32) -> QRaw {
    return q16_fetch8(sel, rb, nb, c8, 4u);
}
fn q_decode8(r: QRaw, nb: u32, c8: u32) -> W8 {
    let b = c8 / 4u;
    let o = 2u * (c8 % 2u);
    let qp = vpair(r.q, o);
    let dm = unpack2x16float(vword(r.m, nb * 16u + 4u * b));
    let hi = c8 % 4u >= 2u;
    let qa = u2fb(nibbles(qp.x, hi), 0.0);
    let qb = u2fb(nibbles(qp.y, hi), 0.0);
    return W8(qa * dm.x + dm.y, qb * dm.x + dm.y);
}
