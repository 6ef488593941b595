//! variants: q4_k_mm
//! include: matvec_batch_i8mm_body
enable f16;
enable wgpu_cooperative_matrix;
// Batched matvec on int8 matrix units, block formats: y[t, r] = (accumulate ? y[t, r] : 0)
// + W[r] . x_hat[t], x_hat the tokens' quantized activations (act_q8.wgsl). See
// include/matvec_batch_i8mm_body.wgsl.
@group(0) @binding(0) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> xq: array<f32>;
@group(0) @binding(2) var<storage, read> xd: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
var<immediate> pc: Push;
const SILU: bool = false;
const WR: u32 = 16u;
fn wraw(sel: bool, i: u32) -> vec4<u32> {
    return w[i];
}
