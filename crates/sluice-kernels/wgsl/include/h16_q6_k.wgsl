//! include: half_bits
// Q6_K weights decoded straight to f16 pairs (as include/h16_q4_k.wgsl: the low nibble
// and the two high bits OR-ed into 0x6400 give 1024 + q, minus 1056 leaves q - 32
// exactly, times the f16-rounded d * scale). Needs the q6_k dtype snippet.

// The four weights of ql word v and qh word hv in the order 0, 2, 1, 3: nibbles at shift
// sh (0 or 4), high bits at shift hs (2 g) of each qh byte.
fn q6_h4(v: u32, hv: u32, sh: u32, hs: u32, ds: vec2<f16>) -> vec4<f16> {
    let bias = vec2<f16>(1056.0h);
    let p = h2_bits(0x64006400u | ((v >> sh) & 0x000F000Fu) | (((hv >> hs) & 0x00030003u) << 4u));
    let q = h2_bits(0x64006400u | ((v >> (sh + 8u)) & 0x000F000Fu)
        | (((hv >> (hs + 8u)) & 0x00030003u) << 4u));
    return vec4<f16>(ds * (p - bias), ds * (q - bias));
}

// Elements 8 * c8 .. + 15 (c8 even) from the raw of q_fetch8(.., c8), in stage order.
fn q_decode16h(w: QRaw, nb: u32, c8: u32) -> H16 {
    let g = (8u * (c8 % 32u) % 128u) / 32u;
    let ds = vec2<f16>(f16(q6_ds(w, nb, c8)));
    let sh = select(0u, 4u, g >= 2u);
    let hs = 2u * g;
    return H16(q6_h4(w.q.x, w.h.x, sh, hs, ds), q6_h4(w.q.y, w.h.y, sh, hs, ds),
        q6_h4(w.q.z, w.h.z, sh, hs, ds), q6_h4(w.q.w, w.h.w, sh, hs, ds));
}
