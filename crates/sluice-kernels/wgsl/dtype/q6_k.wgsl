// Q6_K super-blocks (256 elements: 128 bytes ql, 64 bytes qh, 16 i8 scales, f16 d; half n
// of 128 elements: element 128n + 32g + l (g = 0..3, l = 0..31) has low bits from nibble
// g / 2 of ql[64n + l + 32 (g % 2)], high bits (qh[32n + l] >> 2g) & 3, value
// d * sc[8n + l / 16 + 2g] * (q - 32)). Row sections: ql|qh (192 bytes per block),
// scales (16), d (2).
//! replaces: matvec_body matvec_q_body
//! replaces: matmul_load_float matmul_load_q
//! replaces: matvec_batch_cmt_f16 matvec_batch_cmt_q
//! replaces: matvec_batch_cmr_runs matvec_batch_cmr_h16
//! replaces: h16_dec h16_q6_k
//! include: quant_common
const QBLOCK: u32 = 256u;
// One unit = 16 consecutive l (one scale each) of one half, all four groups g (64
// elements): three aligned vec4 loads of quants.
const QUNIT: u32 = 64u;

fn q_xv4(u: u32, k: u32) -> u32 {
    let s = u / 4u;
    let n = (u / 2u) % 2u;
    let h = u % 2u;
    return 64u * s + 32u * n + 8u * (k / 4u) + 4u * h + (k % 4u);
}

// Two high bits of each byte of w at `shift`, times 16, as integers (combined with the
// nibbles before the float conversion: see u2fb).
fn bits2(w: u32, shift: u32) -> vec4<u32> {
    return ((vec4<u32>(w) >> (vec4<u32>(0u, 8u, 16u, 24u) + shift)) & vec4<u32>(3u)) << vec4<u32>(4u);
}

// A unit's raw words and their dot with x: q_dot's halves (include/quant_common.wgsl).
struct QU { a: vec4<u32>, b: vec4<u32>, q: vec4<u32>, sc: vec4<u32>, d: vec4<u32> }

fn q_load(sel: bool, rb: u32, nb: u32, u: u32) -> QU {
    let s = u / 4u;
    let n = (u / 2u) % 2u;
    let h = u % 2u;
    return QU(wraw(sel, rb + 12u * s + 4u * n + h), wraw(sel, rb + 12u * s + 4u * n + 2u + h),
              wraw(sel, rb + 12u * s + 8u + 2u * n + h), wraw(sel, rb + nb * 12u + s),
              wvec(sel, rb, nb * 208u + 2u * s));
}

fn q_raw_dot(r: QU, nb: u32, u: u32, xs: ptr<function, array<vec4<f32>, 16>>) -> f32 {
    let s = u / 4u;
    let n = (u / 2u) % 2u;
    let h = u % 2u;
    let a = r.a;
    let b = r.b;
    let q = r.q;
    let scv = r.sc;
    let sw0 = i8x4(scv[2u * n]);
    let sw1 = i8x4(scv[2u * n + 1u]);
    let sc = vec4<f32>(sw0[h], sw0[h + 2u], sw1[h], sw1[h + 2u]);
    let d = vhalf(r.d, nb * 208u + 2u * s);
    var g = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        g.x += dot(u2fb(nibbles(a[j], false) | bits2(q[j], 0u), 32.0), (*xs)[j]);
        g.y += dot(u2fb(nibbles(b[j], false) | bits2(q[j], 2u), 32.0), (*xs)[4u + j]);
        g.z += dot(u2fb(nibbles(a[j], true) | bits2(q[j], 4u), 32.0), (*xs)[8u + j]);
        g.w += dot(u2fb(nibbles(b[j], true) | bits2(q[j], 6u), 32.0), (*xs)[12u + j]);
    }
    return dot(d * sc, g);
}

// Elements 8 * c8 .. + 7 of the row: 8 l of one group g of one half (one scale).
fn q_fetch8(sel: bool, rb: u32, nb: u32, c8: u32) -> QRaw {
    return q_fetch8_next(sel, rb, nb, c8, qraw_zero(), false);
}
// The raw words of elements 8 * c8 .. + 7 (q_fetch8's), taking from `prev` (the same
// row's words of c8 - 4) what stays the same through a block when `same` says both lie in
// one: the scales and d.
fn q_fetch8_next(sel: bool, rb: u32, nb: u32, c8: u32, prev: QRaw, same: bool) -> QRaw {
    let s = c8 / 32u;
    let r = 8u * (c8 % 32u);
    let n = r / 128u;
    let g = (r % 128u) / 32u;
    let l0 = r % 32u;
    let si = 8u * n + l0 / 16u + 2u * g;
    var w = prev;
    w.q = wraw(sel, rb + 12u * s + 4u * n + 2u * (g % 2u) + l0 / 16u);
    w.h = wraw(sel, rb + 12u * s + 8u + 2u * n + l0 / 16u);
    if (!same) {
        w.m = wvec(sel, rb, nb * 192u + 16u * s + (si & ~3u));
        w.e = wvec(sel, rb, nb * 208u + 2u * s);
    }
    return w;
}
// d * scale of the 16 elements holding element 8 * c8 (of q_fetch8(.., c8)'s raw).
fn q6_ds(w: QRaw, nb: u32, c8: u32) -> f32 {
    let s = c8 / 32u;
    let r = 8u * (c8 % 32u);
    let si = 8u * (r / 128u) + (r % 32u) / 16u + 2u * ((r % 128u) / 32u);
    let sc = fsel(i8x4(vword(w.m, nb * 192u + 16u * s + (si & ~3u))), si & 3u);
    return vhalf(w.e, nb * 208u + 2u * s) * sc;
}
fn q_decode8(w: QRaw, nb: u32, c8: u32) -> W8 {
    let r = 8u * (c8 % 32u);
    let g = (r % 128u) / 32u;
    let o = (r % 16u) / 4u;
    let qp = vpair(w.q, o);
    let hp = vpair(w.h, o);
    let ds = q6_ds(w, nb, c8);
    let qa = nibbles(qp.x, g >= 2u);
    let qb = nibbles(qp.y, g >= 2u);
    let fa = u2fb(qa | bits2(hp.x, 2u * g), 32.0);
    let fb = u2fb(qb | bits2(hp.y, 2u * g), 32.0);
    return W8(ds * fa, ds * fb);
}
