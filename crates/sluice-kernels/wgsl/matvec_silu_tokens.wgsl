//! variants: f16 bf16 f32 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k q8_0_dp q4_0_dp q4_k_dp q6_k_dp q4_1_dp q5_0_dp q5_1_dp q5_k_dp
//! include: matvec_body
//! include: matvec_no_pick
// Prefill variant: one dispatch covers many tokens (token index = workgroup z).
// Gate/up + SiLU·mul in one dispatch: y[r] = silu(Wg[r] . x) * (Wu[r] . x), Wg = w,
// Wu = w_b; `accumulate` ignored. See include/matvec_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> w_b: WVec;
@group(0) @binding(2) var<storage, read> x: V4s;
@group(0) @binding(3) var<storage, read_write> y: F32s;
var<immediate> pc: Push;

const NORM: bool = false;
const SILU: bool = true;
const X_Q8: bool = false;
const BATCHED: bool = true;
const ROW_LOOP: bool = false;

fn w_b8(i: u32) -> W8 { return decode_w8(w_b.d[i], w_b.d[i + W_VEC4S - 1u]); }
fn norm4(i: u32) -> vec4<f32> { return vec4<f32>(1.0); }
fn wb_raw(i: u32) -> vec4<u32> { return w_b.d[i]; }
