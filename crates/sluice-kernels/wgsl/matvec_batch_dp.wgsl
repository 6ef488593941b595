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
// No second matrix and no q8 output (the gated branches never run here).
fn wb_raw(i: u32) -> vec4<u32> {
    return w.d[i];
}
fn stage_h(t: u32, j: u32, n: u32, v: f32) {}
fn put_h_q8(li: u32, first: u32, n: u32, t0: u32) {}
