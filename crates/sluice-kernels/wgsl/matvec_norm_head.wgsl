//! variants: f16 bf16 f32 q8_0_dp q4_0_dp q4_k_dp q6_k_dp q4_1_dp q5_0_dp q5_1_dp q5_k_dp
//! include: matvec_body
// matvec_norm for the LM head on a grid smaller than the matrix (matvec_resident_grid):
// each workgroup takes every n-th block of rows (ROW_LOOP; the integer-dot variants
// quantize x once for all of them). A kernel of its own: with the row loop in every
// matvec of the family, Qwen3-4B Q4_K_M decode (full grids) fell 376 -> 362 tok/s on the
// H100.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> x: V4s;
@group(0) @binding(2) var<storage, read> norm_w: V4s;
@group(0) @binding(3) var<storage, read_write> y: F32s;
var<immediate> pc: Push;
const NORM: bool = true;
const SILU: bool = false;
const X_Q8: bool = false;
const BATCHED: bool = false;
const ROW_LOOP: bool = true;
fn w_b8(i: u32) -> W8 { return W8(vec4<f32>(0.0), vec4<f32>(0.0)); }
fn norm4(i: u32) -> vec4<f32> { return norm_w.d[i]; }
fn wb_raw(i: u32) -> vec4<u32> { return vec4<u32>(0u); }
