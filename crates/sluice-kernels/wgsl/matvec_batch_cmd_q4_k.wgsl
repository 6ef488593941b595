//! include: matvec_batch_cmdq_body
//! include: matvec_batch_cmdq_q4_k
//! include: matvec_batch_staged_io
//! include: batch_y_f32
enable f16;
enable wgpu_cooperative_matrix;
// The batched Q4_K matvec with the weights' matrix-unit operands built in registers:
// y[t, r] = (accumulate ? y[t, r] : 0) + W[r] . xh[t]. See
// include/matvec_batch_cmdq_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> xv: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) @coherent var<storage, read_write> part: array<f32>;
@group(0) @binding(4) var<storage, read_write> tick: array<atomic<u32>>;
var<immediate> pc: Push;
const NTT: u32 = 2u;
const SG: u32 = 4u;
const SILU: bool = false;
fn silu() -> bool {
    return SILU;
}
const UP_IN_W: bool = false;
fn wb_raw(i: u32) -> vec4<u32> {
    return w.d[i];
}
