//! variants: f16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k
//! include: matvec_batch_cmr_body
//! include: matvec_batch_cmt_f16
//! include: matvec_batch_cmr_runs
//! include: h16_dec
//! include: matvec_batch_staged_io
//! include: batch_y_f32
enable f16;
enable wgpu_cooperative_matrix;
// The row-owning staged batched matvec (matvec_batch_cmt's twin for large matrices):
// y[t, r] = (accumulate ? y[t, r] : 0) + W[r] . xh[t]. See
// include/matvec_batch_cmr_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> xv: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) @coherent var<storage, read_write> part: array<f32>;
@group(0) @binding(4) var<storage, read_write> tick: array<atomic<u32>>;
var<immediate> pc: Push;
const NTT: u32 = 4u;
const SG: u32 = 4u;
const SILU: bool = false;
fn silu() -> bool {
    return SILU;
}
const UP_IN_W: bool = false;
fn wb_raw(i: u32) -> vec4<u32> {
    return w.d[i];
}
