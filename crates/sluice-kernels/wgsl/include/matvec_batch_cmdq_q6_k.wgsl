//! include: h16_k_quads
// The Q6_K reader of include/matvec_batch_cmdq_body.wgsl. GPU layout (decision 0002,
// dtype/q6_k.wgsl): a row's ql|qh (192 bytes per block: ql bytes 0..127, qh 128..191),
// then the i8 scales (16 bytes per block), then d (f16 per block). Element 128 n + 32 g + l
// has low bits from nibble g / 2 of ql[64 n + l + 32 (g % 2)], high bits (qh[32 n + l] >>
// 2 g) & 3, value d sc[8 n + l / 16 + 2 g] (q - 32). Invocation t's ql bytes of half block
// n are 64 n + 16 t .. (g % 2 = t / 2, l = 16 (t % 2) + byte), its qh bytes 32 n + 16 (t %
// 2) ..: its low nibbles (g = t / 2) are columns 32 (t / 2) + 16 (t % 2) + byte of the
// half, its high ones (g = 2 + t / 2) 64 further.

// Invocation t's ql and qh words of half block n of a row.
struct WQ { l: vec4<u32>, h: vec4<u32> }
// A block's scales of a row: the 16 i8 scales, the vec4 holding d and d's half in it.
struct WM { sc: vec4<u32>, d: vec4<u32>, i: u32 }

// Half block hb of block b of the row at vec4 `base` (nb blocks per row): invocation t's
// 16 ql bytes and 16 qh bytes.
fn wq_load(sel: bool, base: u32, nb: u32, b: u32, hb: u32, t: u32) -> WQ {
    return WQ(wraw(sel, base + 12u * b + 4u * hb + t),
        wraw(sel, base + 12u * b + 8u + 2u * hb + t % 2u));
}

// Block b's scales and d of the row at vec4 `base` (the d section starts at byte 208 nb,
// a multiple of 16).
fn wm_load(sel: bool, base: u32, nb: u32, b: u32) -> WM {
    return WM(wraw(sel, base + nb * 12u + b), wraw(sel, base + nb * 13u + b / 8u), b % 8u);
}

// (d sc, 0) as f16 of invocation t's low-nibble scale of half block hb in xy (sc[8 hb +
// t]), its high-nibble one in zw (sc[8 hb + t + 4]).
fn wm_am(m: WM, hb: u32, t: u32) -> vec4<f16> {
    let d = unpack2x16float(m.d[m.i / 2u])[m.i % 2u];
    let lo = f32(extractBits(i32(m.sc[2u * hb]), 8u * t, 8u));
    let hi = f32(extractBits(i32(m.sc[2u * hb + 1u]), 8u * t, 8u));
    return vec4<f16>(vec4<f32>(d * lo, 0.0, d * hi, 0.0));
}

// The weights of bytes 0..3 of word k (nibbles h; the high bits of g = 2 h + t / 2) with
// am = (d sc, 0), in byte order.
fn wq_w4(q: WQ, k: u32, h: u32, t: u32, am: vec2<f16>) -> vec4<f16> {
    return q6_h4(q.l[k], q.h[k], 4u * h, 4u * h + 2u * (t / 2u), vec2<f16>(am.x)).xzyw;
}

// Where the stage holds column 8 m of a half block (halves from the token's row start):
// invocation t = 2 ((m / 4) % 2) + (m / 2) % 2, nibbles h = m / 8, word k = (2 m) % 4 ->
// K step 4 h + k, position 2 t.
fn x_pos(m: u32) -> u32 {
    return 4u * ((m / 4u) % 2u) + 2u * ((m / 2u) % 2u) + 64u * (m / 8u) + 16u * ((2u * m) % 4u);
}
