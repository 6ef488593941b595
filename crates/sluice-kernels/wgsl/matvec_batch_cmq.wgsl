//! variants: q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k
//! include: matvec_batch_cmq_body
//! include: matvec_batch_cm_epilogue
//! include: batch_y_f32
enable f16;
enable wgpu_cooperative_matrix;
// Cooperative-matrix batched-decode matvec, block-format weights: y[t, r] = (accumulate ?
// y[t, r] : 0) + W[r] . xh[t]. See include/matvec_batch_cmq_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> xh: array<f16>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<immediate> pc: Push;
const TT: u32 = 64u;
const WSB_LEN: u32 = 16u;
const SILU: bool = false;
fn wb_raw(i: u32) -> vec4<u32> {
    return w.d[i];
}
