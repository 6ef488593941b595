//! include: half_bits
// Q5_K weights decoded straight to f16 pairs (as include/h16_q4_k.wgsl, with the fifth
// bit from qh OR-ed in at bit 4 before the conversion). Needs the q5_k dtype snippet.

// The four weights of quant word v and qh word hv in the order 0, 2, 1, 3: nibbles at
// shift sh (0 or 4), fifth bits at shift hs of each qh byte.
fn q5_h4(v: u32, hv: u32, sh: u32, hs: u32, a: vec2<f16>, mn: vec2<f16>) -> vec4<f16> {
    let bias = vec2<f16>(1024.0h);
    let p = h2_bits(0x64006400u | ((v >> sh) & 0x000F000Fu) | (((hv >> hs) & 0x00010001u) << 4u));
    let q = h2_bits(0x64006400u | ((v >> (sh + 8u)) & 0x000F000Fu)
        | (((hv >> (hs + 8u)) & 0x00010001u) << 4u));
    return vec4<f16>(fma(a, p - bias, -mn), fma(a, q - bias, -mn));
}

// Elements 8 * c8 .. + 15 (c8 even) from the raw of q_fetch8(.., c8), in stage order.
fn q_decode16h(w: QRaw, nb: u32, c8: u32) -> H16 {
    let r = 8u * (c8 % 32u);
    let hi = (r % 64u) / 32u;
    let sh = 4u * hi;
    let hs = 2u * (r / 64u) + hi;
    let am = vec2<f16>(k_am(w.m, r));
    let a = vec2<f16>(am.x);
    let mn = vec2<f16>(am.y);
    return H16(q5_h4(w.q.x, w.h.x, sh, hs, a, mn), q5_h4(w.q.y, w.h.y, sh, hs, a, mn),
        q5_h4(w.q.z, w.h.z, sh, hs, a, mn), q5_h4(w.q.w, w.h.w, sh, hs, a, mn));
}
