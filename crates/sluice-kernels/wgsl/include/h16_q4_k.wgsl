//! include: half_bits
// Q4_K weights decoded straight to f16 pairs (the staged batched matvec's Q4_K reader,
// include/matvec_batch_cmr_h16.wgsl, and its probe decode16h_probe). Needs the q4_k dtype
// snippet (QRaw, k_am) and `enable f16`.

// The four weights of word v (its bytes' low nibbles, or high ones for sh = 4) in the
// order 0, 2, 1, 3, each a * q - mn: two nibbles at bits 0 and 16 OR-ed into the halves
// 0x6400 (1024.0, whose ulp is 1) give 1024 + q exactly, so a packed subtraction leaves
// q and a packed fma the weight (one f16 rounding, with a and mn rounded to f16 first).
fn q4_h4(v: u32, sh: u32, a: vec2<f16>, mn: vec2<f16>) -> vec4<f16> {
    let bias = vec2<f16>(1024.0h);
    let p = h2_bits(0x64006400u | ((v >> sh) & 0x000F000Fu)) - bias;
    let q = h2_bits(0x64006400u | ((v >> (sh + 8u)) & 0x000F000Fu)) - bias;
    return vec4<f16>(fma(a, p, -mn), fma(a, q, -mn));
}

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
