//! include: half_bits
// Four K-quant weights at a time decoded straight to f16 (the staged batched matvec's
// readers, include/h16_q4_k.wgsl and _q6_k.wgsl, and the register-built operands',
// include/matvec_batch_cmdq_q4_k.wgsl and _q6_k.wgsl). Needs `enable f16`.

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

// The four weights of ql word v and qh word hv in the order 0, 2, 1, 3: nibbles at shift
// sh (0 or 4), high bits at shift hs (2 g) of each qh byte.
fn q6_h4(v: u32, hv: u32, sh: u32, hs: u32, ds: vec2<f16>) -> vec4<f16> {
    let bias = vec2<f16>(1056.0h);
    let p = h2_bits(0x64006400u | ((v >> sh) & 0x000F000Fu) | (((hv >> hs) & 0x00030003u) << 4u));
    let q = h2_bits(0x64006400u | ((v >> (sh + 8u)) & 0x000F000Fu)
        | (((hv >> (hs + 8u)) & 0x00030003u) << 4u));
    return vec4<f16>(ds * (p - bias), ds * (q - bias));
}
