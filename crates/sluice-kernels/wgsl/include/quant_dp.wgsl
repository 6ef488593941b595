// Shared by the integer-dot snippets (dtype/q*_dp.wgsl; only they use dot4I8Packed, which
// needs shaderIntegerDotProduct). Each snippet splits a row's work unit u into
// `q_unit(sel, rb, nb, u) -> DpUnit` (its weights loaded and prepared once) and
// `q_unit_dot(p, u, t0) -> f32` (that unit dotted with a quantized x whose tile starts at
// element t0), reading x through the kernel's accessors: `xw4(i) -> vec4<u32>` (int8
// words i .. i + 3 of the tile, four values each; i a multiple of 4) and
// `xdv(b) -> vec4<f32>` (block b of 32: d, d * sum of its first 16 q, d * sum of its
// last 16 q). include/matvec_q8_body.wgsl reads them from shared memory (one token),
// include/matvec_batch_dp_body.wgsl from the tokens' quantized rows (act_q8.wgsl).

// One work unit of a row prepared for integer dot products: up to 64 weights as int8
// bytes, four per word (w0 .. w3, in the order the snippet's q_unit_dot reads them;
// 32-weight units leave w2, w3 zero) and the unit's float factors (its scales, as the
// snippet says).
struct DpUnit { w0: vec4<u32>, w1: vec4<u32>, w2: vec4<u32>, w3: vec4<u32>, f: vec4<f32> }

fn dp_unit2(a: vec4<u32>, b: vec4<u32>, f: vec4<f32>) -> DpUnit {
    return DpUnit(a, b, vec4<u32>(0u), vec4<u32>(0u), f);
}

// A Q5_0 / Q5_1 unit's five-bit values (0..31) as bytes: nibbles of q (low ones for
// elements 0..15, high ones for 16..31 with `high`) with bit 4 from the matching bits of
// qh.
fn q5_bytes(q: vec4<u32>, qh: u32, high: bool) -> vec4<u32> {
    let n = select(q, q >> vec4<u32>(4u), high) & vec4<u32>(0x0F0F0F0Fu);
    let b = vec4<u32>(qh) >> (vec4<u32>(0u, 4u, 8u, 12u) + select(0u, 16u, high));
    return n | ((b & vec4<u32>(1u)) << vec4<u32>(4u)) | ((b & vec4<u32>(2u)) << vec4<u32>(11u))
        | ((b & vec4<u32>(4u)) << vec4<u32>(18u)) | ((b & vec4<u32>(8u)) << vec4<u32>(25u));
}

// Sum of dot4I8Packed over the four words of a and b.
fn dot16(a: vec4<u32>, b: vec4<u32>) -> i32 {
    return dot4I8Packed(a.x, b.x) + dot4I8Packed(a.y, b.y) + dot4I8Packed(a.z, b.z)
        + dot4I8Packed(a.w, b.w);
}

// Unit u's 32 weights (two vec4s of int8 words) dotted with x words xw0 .. xw0 + 7.
fn dot32(p: DpUnit, xw0: u32) -> i32 {
    return dot16(p.w0, xw4(xw0)) + dot16(p.w1, xw4(xw0 + 4u));
}

// The usual entry: unit u of the row at vec4 rb dotted with the tile's x.
fn q_dot8(sel: bool, rb: u32, nb: u32, u: u32, t0: u32) -> f32 {
    return q_unit_dot(q_unit(sel, rb, nb, u), u, t0);
}
