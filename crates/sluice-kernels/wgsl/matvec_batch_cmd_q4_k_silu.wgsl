//! include: matvec_batch_cmdq_body
//! include: matvec_batch_cmdq_q4_k
//! include: matvec_batch_staged_io
//! include: batch_y_pairs
enable f16;
enable wgpu_cooperative_matrix;
// The batched Q4_K gate/up with the weights' matrix-unit operands built in registers:
// y[t, r] = silu(Wg[r] . xh[t]) * (Wu[r] . xh[t]) (Wg = w, Wu = w_b). See
// include/matvec_batch_cmdq_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> w_b: WVec;
@group(0) @binding(2) var<storage, read> xv: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> y: array<u32>; // include/batch_y_pairs.wgsl
@group(0) @binding(4) @coherent var<storage, read_write> part: array<f32>;
@group(0) @binding(5) var<storage, read_write> tick: array<atomic<u32>>;
var<immediate> pc: Push;
const NTT: u32 = 2u;
const SG: u32 = 4u;
const SILU: bool = true;
fn silu() -> bool {
    return SILU;
}
const UP_IN_W: bool = false;
fn wb_raw(i: u32) -> vec4<u32> {
    return w_b.d[i];
}
