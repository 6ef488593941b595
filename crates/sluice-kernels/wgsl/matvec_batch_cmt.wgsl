//! variants: f16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k
//! include: matvec_batch_cmt_body
//! include: matvec_batch_cmt_f16
//! include: matvec_batch_staged_io
//! include: matvec_batch_cm_epilogue
//! include: batch_y_f32
enable f16;
enable wgpu_cooperative_matrix;
// Cooperative-matrix batched matvec, operands staged through shared memory: y[t, r] =
// (accumulate ? y[t, r] : 0) + W[r] . xh[t]. Block formats swap the f16 weight reader
// for include/matvec_batch_cmt_q.wgsl (blocks decoded as they are staged). See
// include/matvec_batch_cmt_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> xv: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) @coherent var<storage, read_write> part: array<f32>;
@group(0) @binding(4) var<storage, read_write> tick: array<atomic<u32>>;
var<immediate> pc: Push;
const NTT: u32 = 4u;
const SILU: bool = false;
// No second matrix (the gated branches never run here).
const UP_IN_W: bool = false;
fn wb_raw(i: u32) -> vec4<u32> {
    return w.d[i];
}
