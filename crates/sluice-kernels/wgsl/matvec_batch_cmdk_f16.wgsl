//! include: batch_y_f32
//! include: half_bits
//! include: matvec_batch_cmd_f16_body
//! include: matvec_batch_cmd_f16_split
//! include: matvec_batch_split_out
//! include: matvec_batch_staged_io
enable f16;
enable wgpu_cooperative_matrix;
// matvec_batch_cmd_f16 with K split over workgroups (the batched engine's f16 matrices;
// bindings, push constants and layout as matvec_batch_cmdq, `kchunks` counting stages of
// 128 columns): y[t, r] = (y_mode Y_ADD ? y[t, r] : 0) + W[r] . xh[t]. See
// include/matvec_batch_cmd_f16_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> xv: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) @coherent var<storage, read_write> part: array<f32>;
@group(0) @binding(4) var<storage, read_write> tick: array<atomic<u32>>;
var<immediate> pc: Push;
const NTT: u32 = 2u;
const SILU: bool = false;
fn silu() -> bool {
    return SILU;
}
// Only the gated kernel has a second matrix (never called here).
const UP_IN_W: bool = false;
fn wb_raw(i: u32) -> vec4<u32> {
    return vec4<u32>(0u);
}
