//! include: h16_k_quads
// Q4_K weights decoded straight to f16 pairs (the staged batched matvec's Q4_K reader,
// include/matvec_batch_cmr_h16.wgsl, and its probe decode16h_probe). Needs the q4_k dtype
// snippet (QRaw, k_am) and `enable f16`.

// Elements 8 * c8 .. + 15 (c8 even) from the raw of q_fetch8(.., c8), in stage order:
// each within 2^-9 of its 32-element sub-block's largest magnitude of the exact value (a
// and mn are rounded to f16 before the product; decision 0009).
fn q_decode16h(w: QRaw, nb: u32, c8: u32) -> H16 {
    let r = 8u * (c8 % 32u);
    let sh = select(0u, 4u, (r % 64u) >= 32u);
    let am = vec2<f16>(k_am(w.m, r));
    let a = vec2<f16>(am.x);
    let mn = vec2<f16>(am.y);
    return H16(q4_h4(w.q.x, sh, a, mn), q4_h4(w.q.y, sh, a, mn), q4_h4(w.q.z, sh, a, mn),
        q4_h4(w.q.w, sh, a, mn));
}
