//! variants: q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k
//! include: matvec_batch_cmq_body
//! include: matvec_batch_cm_epilogue
//! include: batch_y_pairs
enable f16;
enable wgpu_cooperative_matrix;
// Cooperative-matrix batched-decode gate/up, block-format weights: y[t, r] =
// silu(Wg[r] . xh[t]) * (Wu[r] . xh[t]) (Wg = w, Wu = w_b, same format). See
// include/matvec_batch_cmq_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> w_b: WVec;
@group(0) @binding(2) var<storage, read> xh: array<f16>;
@group(0) @binding(3) var<storage, read_write> y: array<u32>; // include/batch_y_pairs.wgsl
var<immediate> pc: Push;
const TT: u32 = 64u;
const WSB_LEN: u32 = 10240u;
const SILU: bool = true;
fn wb_raw(i: u32) -> vec4<u32> {
    return w_b.d[i];
}
