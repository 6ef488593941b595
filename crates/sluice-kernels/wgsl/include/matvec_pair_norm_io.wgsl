// Bindings of the matvec kernels over two matrices with a folded RMSNorm
// (matvec_silu_norm, matvec_silu_norm_tokens, matvec_batch_silu_norm: gate in w, up in
// w_b; matvec_norm_two: a second format in w_b): W, W_b, x, the norm weight, y. The kernel
// sets SILU (and X_Q8, BATCHED, ROW_LOOP for include/matvec_body.wgsl or the dtype's body).
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> w_b: WVec;
@group(0) @binding(2) var<storage, read> x: V4s;
@group(0) @binding(3) var<storage, read> norm_w: V4s;
@group(0) @binding(4) var<storage, read_write> y: F32s;
var<immediate> pc: Push;
const NORM: bool = true;
fn w_b8(i: u32) -> W8 { return decode_w8(w_b.d[i], w_b.d[i + W_VEC4S - 1u]); }
fn norm4(i: u32) -> vec4<f32> { return norm_w.d[i]; }
fn wb_raw(i: u32) -> vec4<u32> { return w_b.d[i]; }
