//! variants: f16 bf16 f32
//! include: matmul_cm_body
enable f16;
enable wgpu_cooperative_matrix;
// Cooperative-matrix (matrix units) version of the tiled matmul (prefill, batched decode): y[t, r] = (accumulate ? y[t, r] : 0) + W[r] . x[t].
// See include/matmul_cm_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> x: V4s;
@group(0) @binding(2) var<storage, read_write> y: F32s;
var<immediate> pc: Push;
const NORM: bool = false;
const SILU: bool = false;
fn load_b8(i: u32) -> W8 { return W8(vec4<f32>(0.0), vec4<f32>(0.0)); }
fn norm1(c: u32) -> f32 { return 1.0; }
