//! variants: q8_0_dp q4_0_dp q4_1_dp q5_0_dp q5_1_dp q4_k_dp q5_k_dp q6_k_dp
//! include: matvec_batch_dp_body
// Integer-dot batched matvec for block formats: y[t, r] = (accumulate ? y[t, r] : 0) +
// W[r] . x_hat[t], x_hat the tokens' quantized activations (act_q8.wgsl). See
// include/matvec_batch_dp_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> xq: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> xd: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
var<immediate> pc: Push;
const SILU: bool = false;
// No second matrix (the gated branches never run here).
fn wb_raw(i: u32) -> vec4<u32> {
    return w.d[i];
}
