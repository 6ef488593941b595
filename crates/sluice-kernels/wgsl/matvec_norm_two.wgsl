//! variants: q4_k_dp__q6_k_dp q5_k_dp__q6_k_dp
//! include: matvec_body
//! include: matvec_two_hooks
//! second: quant_dp
// RMSNorm feeding a matvec over two matrices of two block formats in one dispatch (a
// layer's q|k in Q4_K or Q5_K and its v in Q6_K, as llama.cpp's K_M mixtures make them):
// y[r] = inv * W[r] . (x * norm_w) for the first matrix's rows, y[second_y + r] = inv *
// W_b[r] . (x * norm_w) for the second's, x quantized once per workgroup as in matvec_norm.
// Both matrices run the same plan (push field tpr); workgroups from second_first take the
// second matrix. See include/matvec_q8_body.wgsl and include/matvec_two_hooks.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> w_b: WVec;
@group(0) @binding(2) var<storage, read> x: V4s;
@group(0) @binding(3) var<storage, read> norm_w: V4s;
@group(0) @binding(4) var<storage, read_write> y: F32s;
var<immediate> pc: Push;
const NORM: bool = true;
const SILU: bool = false;
const X_Q8: bool = false;
const BATCHED: bool = false;
const ROW_LOOP: bool = false;
fn w_b8(i: u32) -> W8 { return W8(vec4<f32>(0.0), vec4<f32>(0.0)); }
fn norm4(i: u32) -> vec4<f32> { return norm_w.d[i]; }
fn wb_raw(i: u32) -> vec4<u32> { return w_b.d[i]; }
