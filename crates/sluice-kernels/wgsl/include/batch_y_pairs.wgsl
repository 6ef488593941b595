// y of the gated cooperative-matrix batched matvecs (`y: array<u32>` in the kernel file):
// f32 bits per element (Y_STORE), or (Y_F16_PAIRS) f16 pairs per word — the down
// projection's matrix-unit input, bit for bit what act_f16.wgsl makes of the f32 values,
// `y_stride` then counting halves. The plain kernels take include/batch_y_f32.wgsl.
const Y_STORE: u32 = 0u;
const Y_ADD: u32 = 1u;
const Y_F16_PAIRS: u32 = 2u;

// Element o of y (f32).
fn load_y(o: u32) -> f32 {
    return bitcast<f32>(y[o]);
}

// Element o of y set to v (f32).
fn store_y(o: u32, v: f32) {
    y[o] = bitcast<u32>(v);
}

// Elements o, o + 1 (o even) set to v as one word of two halves.
fn store_y2(o: u32, v: vec2<f32>) {
    y[o / 2u] = pack2x16float(v);
}

// SiLU(g) * u, element-wise (the gated epilogue).
fn silu_mul(g: vec2<f32>, u: vec2<f32>) -> vec2<f32> {
    return g / (1.0 + exp(-g)) * u;
}
