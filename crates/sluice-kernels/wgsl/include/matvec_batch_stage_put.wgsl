// The staging stores of the staged cooperative-matrix batched matvecs
// (include/matvec_batch_cmt_body.wgsl, _cmr_body.wgsl) to `stage` (declared by the body).

// Stores 8 halves at half o (a multiple of 8) of the stage: two 8-byte stores (eight
// 2-byte ones measured slower, BENCHMARKS.md, twelfth session).
fn put8(o: u32, a: vec4<f16>, b: vec4<f16>) {
    stage[o / 4u] = a;
    stage[o / 4u + 1u] = b;
}

// Stores the 8 halves packed in v (f16 pairs) at half o of the stage.
fn put(o: u32, v: vec4<u32>) {
    let a = vec4<f16>(vec2<f16>(unpack2x16float(v.x)), vec2<f16>(unpack2x16float(v.y)));
    let b = vec4<f16>(vec2<f16>(unpack2x16float(v.z)), vec2<f16>(unpack2x16float(v.w)));
    put8(o, a, b);
}
