//! variants: f16 bf16 f32 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k
//! include: matmul_body
//! include: matmul_load_float
// Tiled gate/up matmul with SiLU: y[t, r] = silu(Wg[r] . x[t]) * (Wu[r] . x[t]).
// See include/matmul_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> w_b: WVec;
@group(0) @binding(2) var<storage, read> x: V4s;
@group(0) @binding(3) var<storage, read_write> y: F32s;
var<immediate> pc: Push;
const NORM: bool = false;
const SILU: bool = true;
const WB_LEN: u32 = 2080u;
fn wb_raw(i: u32) -> vec4<u32> { return w_b.d[i]; }
fn norm1(c: u32) -> f32 { return 1.0; }
