// The two halves of a word's bits (bits 0-15 first), for modules with `enable f16`.
// naga 30 refuses bitcast<vec2<f16>>(u32), so the body converts through f32 (the same value
// for every non-NaN pattern) and build.rs (half_pair_fixup) replaces the body of every
// function of this type with one OpBitcast: no other function may take a u32 and return
// a vec2<f16>.
fn h2_bits(b: u32) -> vec2<f16> {
    return vec2<f16>(unpack2x16float(b));
}

// 16 weights as f16 in stage order: each 4 consecutive columns as 0, 2, 1, 3 (the f16
// decoders of the staged batched matvec, include/h16_<format>.wgsl).
struct H16 { a: vec4<f16>, b: vec4<f16>, c: vec4<f16>, d: vec4<f16> }
