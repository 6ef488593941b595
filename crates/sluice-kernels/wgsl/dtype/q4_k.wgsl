// Q4_K super-blocks (256 elements: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128
// bytes of nibbles: chunk c of 64 elements = bytes 32c..32c+31, low nibble = element
// 64c + l, high = 64c + 32 + l; value d * sc * q - dmin * m). Row sections: qs (128
// bytes per block), d|dmin|scales (16).
//! replaces: matvec_body matvec_q_body
//! replaces: matmul_load_float matmul_load_q
//! replaces: matvec_batch_cmt_f16 matvec_batch_cmt_q
//! replaces: matvec_batch_cmr_runs matvec_batch_cmr_h16
//! replaces: h16_dec h16_q4_k
//! include: quant_common
//! include: quant_k
const QBLOCK: u32 = 256u;
// One unit = 32 elements: half h of a 64-element chunk c's 32 quant bytes (16 bytes: low
// nibbles = elements 64c + 16h + i, high = 64c + 32 + 16h + i, i = 0..15).
const QUNIT: u32 = 32u;

fn q_xv4(u: u32, k: u32) -> u32 {
    let s = u / 8u;
    let c = (u % 8u) / 2u;
    let h = u % 2u;
    return 64u * s + 16u * c + 4u * h + (k % 4u) + 8u * (k / 4u);
}

// A unit's raw words and their dot with x: q_dot's halves (include/quant_common.wgsl).
struct QU { q: vec4<u32>, m: vec4<u32> }

fn q_load(sel: bool, rb: u32, nb: u32, u: u32) -> QU {
    return QU(wraw(sel, rb + u), wraw(sel, rb + nb * 8u + u / 8u));
}

fn q_raw_dot(r: QU, nb: u32, u: u32, xs: ptr<function, array<vec4<f32>, 16>>) -> f32 {
    let c = (u % 8u) / 2u;
    let q = r.q;
    let m = r.m;
    var slo = 0.0;
    var shi = 0.0;
    var xlo = vec4<f32>(0.0);
    var xhi = vec4<f32>(0.0);
    for (var k = 0u; k < 4u; k++) {
        slo += dot(lo4(q[k]), (*xs)[k]);
        shi += dot(hi4(q[k]), (*xs)[k + 4u]);
        xlo += (*xs)[k];
        xhi += (*xs)[k + 4u];
    }
    let dm = unpack2x16float(m.x);
    let sm = k_scale_min2(m, c);
    let one = vec4<f32>(1.0);
    return dm.x * (sm.x * slo + sm.z * shi) - dm.y * (sm.y * dot(xlo, one) + sm.w * dot(xhi, one));
}

// Elements 8 * c8 .. + 7 of the row: 8 bytes' low or high nibbles of one 32-element
// sub-block (one scale and min).
fn q_fetch8(sel: bool, rb: u32, nb: u32, c8: u32) -> QRaw {
    return q_fetch8_next(sel, rb, nb, c8, qraw_zero(), false);
}
// The raw words of elements 8 * c8 .. + 7 (q_fetch8's), taking from `prev` (the same
// row's words of c8 - 4) what stays the same through a block when `same` says both lie in
// one: the scales (with d and dmin).
fn q_fetch8_next(sel: bool, rb: u32, nb: u32, c8: u32, prev: QRaw, same: bool) -> QRaw {
    let s = c8 / 32u;
    let r = 8u * (c8 % 32u);
    var w = prev;
    w.q = wraw(sel, rb + 8u * s + 2u * (r / 64u) + (r % 32u) / 16u);
    if (!same) {
        w.m = wraw(sel, rb + nb * 8u + s);
    }
    return w;
}
fn q_decode8(w: QRaw, nb: u32, c8: u32) -> W8 {
    let r = 8u * (c8 % 32u);
    let hi = (r % 64u) / 32u;
    let o = (r % 16u) / 4u;
    let qp = vpair(w.q, o);
    let am = k_am(w.m, r);
    let a = am.x;
    let mn = am.y;
    let qa = u2fb(nibbles(qp.x, hi == 1u), 0.0);
    let qb = u2fb(nibbles(qp.y, hi == 1u), 0.0);
    return W8(a * qa - mn, a * qb - mn);
}
