//! include: batch_y_pairs
//! include: half_bits
//! include: matvec_batch_cmd_f16_body
//! include: matvec_batch_cmd_f16_split
//! include: matvec_batch_split_out
//! include: matvec_batch_staged_io
enable f16;
enable wgpu_cooperative_matrix;
// matvec_batch_cmd_f16_silu with K split over workgroups (the batched engine's f16
// gate/up pairs; bindings, push constants and layout as matvec_batch_cmdq):
// y[t, r] = silu(Wg[r] . xh[t]) * (Wu[r] . xh[t]) (Wg = w, Wu = w_b), as f16 pairs
// (Y_F16_PAIRS, down's input) or f32. See include/matvec_batch_cmd_f16_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> w_b: WVec;
@group(0) @binding(2) var<storage, read> xv: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> y: array<u32>; // include/batch_y_pairs.wgsl
@group(0) @binding(4) @coherent var<storage, read_write> part: array<f32>;
@group(0) @binding(5) var<storage, read_write> tick: array<atomic<u32>>;
var<immediate> pc: Push;
const NTT: u32 = 2u;
const SILU: bool = true;
fn silu() -> bool {
    return SILU;
}
const UP_IN_W: bool = false;
fn wb_raw(i: u32) -> vec4<u32> {
    return w_b.d[i];
}
