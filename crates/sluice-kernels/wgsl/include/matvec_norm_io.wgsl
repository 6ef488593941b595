// Bindings of the single-matrix matvec kernels with a folded RMSNorm (matvec_norm,
// matvec_norm_tokens, matvec_norm_head over include/matvec_body.wgsl or the dtype's body,
// which set X_Q8, BATCHED and ROW_LOOP; matvec_batch_norm): W, x, the norm weight, y, and
// the stubs for the gated branch they never take.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> x: V4s;
@group(0) @binding(2) var<storage, read> norm_w: V4s;
@group(0) @binding(3) var<storage, read_write> y: F32s;
var<immediate> pc: Push;
const NORM: bool = true;
const SILU: bool = false;
fn w_b8(i: u32) -> W8 { return W8(vec4<f32>(0.0), vec4<f32>(0.0)); }
fn norm4(i: u32) -> vec4<f32> { return norm_w.d[i]; }
fn wb_raw(i: u32) -> vec4<u32> { return vec4<u32>(0u); }
