// Q5_K super-blocks (256 elements: f16 d, f16 dmin, 12 bytes of scales/mins, 32 bytes qh
// (bit 2c / 2c + 1 of byte l = fifth bit of element 64c + l / 64c + 32 + l), 128 bytes of
// nibbles as Q4_K). Row sections: qs (128 bytes per block), qh (32), d|dmin|scales (16).
//! replaces: matvec_body matvec_q_body
//! replaces: matmul_load_float matmul_load_q
//! replaces: matvec_batch_cmt_f16 matvec_batch_cmt_q
//! replaces: matvec_batch_cmr_runs matvec_batch_cmr_h16
//! replaces: h16_dec h16_q5_k
//! include: quant_common
//! include: quant_k
const QBLOCK: u32 = 256u;
const QUNIT: u32 = 64u;

fn q_xv4(u: u32, k: u32) -> u32 { return u * 16u + k; }

// A unit's raw words and their dot with x: q_dot's halves (include/quant_common.wgsl).
struct QU { a: vec4<u32>, b: vec4<u32>, ha: vec4<u32>, hb: vec4<u32>, m: vec4<u32> }

fn q_load(sel: bool, rb: u32, nb: u32, u: u32) -> QU {
    let s = u / 4u;
    let c = u % 4u;
    return QU(wraw(sel, rb + 8u * s + 2u * c), wraw(sel, rb + 8u * s + 2u * c + 1u),
              wraw(sel, rb + nb * 8u + 2u * s), wraw(sel, rb + nb * 8u + 2u * s + 1u),
              wraw(sel, rb + nb * 10u + s));
}

fn q_raw_dot(r: QU, nb: u32, u: u32, xs: ptr<function, array<vec4<f32>, 16>>) -> f32 {
    let c = u % 4u;
    let a = r.a;
    let b = r.b;
    let ha = r.ha;
    let hb = r.hb;
    let m = r.m;
    var slo = 0.0;
    var shi = 0.0;
    var xlo = vec4<f32>(0.0);
    var xhi = vec4<f32>(0.0);
    for (var k = 0u; k < 4u; k++) {
        slo += dot(lo4(a[k]) + bits16(ha[k], 2u * c), (*xs)[k])
            + dot(lo4(b[k]) + bits16(hb[k], 2u * c), (*xs)[k + 4u]);
        shi += dot(hi4(a[k]) + bits16(ha[k], 2u * c + 1u), (*xs)[k + 8u])
            + dot(hi4(b[k]) + bits16(hb[k], 2u * c + 1u), (*xs)[k + 12u]);
        xlo += (*xs)[k] + (*xs)[k + 4u];
        xhi += (*xs)[k + 8u] + (*xs)[k + 12u];
    }
    let dm = unpack2x16float(m.x);
    let sm = k_scale_min2(m, c);
    let one = vec4<f32>(1.0);
    return dm.x * (sm.x * slo + sm.z * shi) - dm.y * (sm.y * dot(xlo, one) + sm.w * dot(xhi, one));
}

// Elements 8 * c8 .. + 7 of the row (nibbles as Q4_K, fifth bits from qh).
fn q_fetch8(sel: bool, rb: u32, nb: u32, c8: u32) -> QRaw {
    return q_fetch8_next(sel, rb, nb, c8, qraw_zero(), false);
}
// The raw words of elements 8 * c8 .. + 7 (q_fetch8's), taking from `prev` (the same
// row's words of c8 - 4) what stays the same through a block when `same` says both lie in
// one: the fifth-bit word (the same vec4 for c8 and c8 - 4) and the scales.
fn q_fetch8_next(sel: bool, rb: u32, nb: u32, c8: u32, prev: QRaw, same: bool) -> QRaw {
    let s = c8 / 32u;
    let r = 8u * (c8 % 32u);
    let l0 = r % 32u;
    var w = prev;
    w.q = wraw(sel, rb + 8u * s + 2u * (r / 64u) + l0 / 16u);
    if (!same) {
        w.h = wraw(sel, rb + nb * 8u + 2u * s + l0 / 16u);
        w.m = wraw(sel, rb + nb * 10u + s);
    }
    return w;
}
fn q_decode8(w: QRaw, nb: u32, c8: u32) -> W8 {
    let r = 8u * (c8 % 32u);
    let c = r / 64u;
    let hi = (r % 64u) / 32u;
    let o = (r % 16u) / 4u;
    let qp = vpair(w.q, o);
    let hp = vpair(w.h, o);
    let am = k_am(w.m, r);
    let a = am.x;
    let mn = am.y;
    let qa = u2fb(nibbles(qp.x, hi == 1u), 0.0);
    let qb = u2fb(nibbles(qp.y, hi == 1u), 0.0);
    let sh = 2u * c + hi;
    return W8(a * (qa + bits16(hp.x, sh)) - mn, a * (qb + bits16(hp.y, sh)) - mn);
}
