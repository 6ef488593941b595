//! variants: f16 bf16 f32
//! include: matvec_batch_body
// Batched-decode variant of matvec_silu_norm: see include/matvec_batch_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> w_b: WVec;
@group(0) @binding(2) var<storage, read> x: V4s;
@group(0) @binding(3) var<storage, read> norm_w: V4s;
@group(0) @binding(4) var<storage, read_write> y: F32s;
var<immediate> pc: Push;
const NORM: bool = true;
const SILU: bool = true;
fn w_b8(i: u32) -> W8 { return decode_w8(w_b.d[i], w_b.d[i + W_VEC4S - 1u]); }
fn norm4(i: u32) -> vec4<f32> { return norm_w.d[i]; }
fn wb_raw(i: u32) -> vec4<u32> { return w_b.d[i]; }
