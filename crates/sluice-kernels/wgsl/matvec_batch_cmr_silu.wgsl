//! variants: f16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k
//! include: matvec_batch_cmr_body
//! include: matvec_batch_cmt_f16
//! include: matvec_batch_cmr_runs
//! include: h16_dec
//! include: matvec_batch_staged_io
//! include: batch_y_pairs
enable f16;
enable wgpu_cooperative_matrix;
// The row-owning staged batched gate/up (matvec_batch_cmt_silu's twin for large
// matrices): y[t, r] = silu(Wg[r] . xh[t]) * (Wu[r] . xh[t]) (Wg = w, Wu = w_b, same
// dtype). See include/matvec_batch_cmr_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> w_b: WVec;
@group(0) @binding(2) var<storage, read> xv: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> y: array<u32>; // include/batch_y_pairs.wgsl
@group(0) @binding(4) @coherent var<storage, read_write> part: array<f32>;
@group(0) @binding(5) var<storage, read_write> tick: array<atomic<u32>>;
var<immediate> pc: Push;
const NTT: u32 = 4u;
const SG: u32 = 4u;
const SILU: bool = true;
fn silu() -> bool {
    return SILU;
}
const UP_IN_W: bool = false;
fn wb_raw(i: u32) -> vec4<u32> {
    return w_b.d[i];
}
