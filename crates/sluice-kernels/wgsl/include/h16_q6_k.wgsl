//! include: h16_k_quads
// Q6_K weights decoded straight to f16 pairs (as include/h16_q4_k.wgsl: the low nibble
// and the two high bits OR-ed into 0x6400 give 1024 + q, minus 1056 leaves q - 32
// exactly, times the f16-rounded d * scale). Needs the q6_k dtype snippet.

// Elements 8 * c8 .. + 15 (c8 even) from the raw of q_fetch8(.., c8), in stage order.
fn q_decode16h(w: QRaw, nb: u32, c8: u32) -> H16 {
    let g = (8u * (c8 % 32u) % 128u) / 32u;
    let ds = vec2<f16>(f16(q6_ds(w, nb, c8)));
    let sh = select(0u, 4u, g >= 2u);
    let hs = 2u * g;
    return H16(q6_h4(w.q.x, w.h.x, sh, hs, ds), q6_h4(w.q.y, w.h.y, sh, hs, ds),
        q6_h4(w.q.z, w.h.z, sh, hs, ds), q6_h4(w.q.w, w.h.w, sh, hs, ds));
}
