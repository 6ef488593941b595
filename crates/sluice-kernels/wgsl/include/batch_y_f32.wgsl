// y of the cooperative-matrix batched matvecs without a gate (`y: array<f32>` in the kernel
// file): stored or added to (`pc.y_mode`, Y_STORE or Y_ADD). The gated kernels take
// include/batch_y_pairs.wgsl instead; both define the same names.
const Y_STORE: u32 = 0u;
const Y_ADD: u32 = 1u;
const Y_F16_PAIRS: u32 = 2u;

// Element o of y.
fn load_y(o: u32) -> f32 {
    return y[o];
}

// Element o of y set to v.
fn store_y(o: u32, v: f32) {
    y[o] = v;
}

// Only the gated kernels write f16 pairs (never reached here).
fn store_y2(o: u32, v: vec2<f32>) {
}

// SiLU(g) * u, element-wise (the gated epilogue).
fn silu_mul(g: vec2<f32>, u: vec2<f32>) -> vec2<f32> {
    return g / (1.0 + exp(-g)) * u;
}
