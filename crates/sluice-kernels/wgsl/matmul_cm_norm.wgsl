//! variants: f16 bf16 f32 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k
//! include: matmul_cm_body
//! include: matmul_load_float
enable f16;
enable wgpu_cooperative_matrix;
// Cooperative-matrix (matrix units) version of the tiled matmul with RMSNorm folded on the input: y[t, r] = (accumulate ? y[t, r] : 0) +
// inv_t * W[r] . (x[t] * norm_w). See include/matmul_cm_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> x: V4s;
@group(0) @binding(2) var<storage, read> norm_w: F32s;
@group(0) @binding(3) var<storage, read_write> y: F32s;
var<immediate> pc: Push;
const NORM: bool = true;
const SILU: bool = false;
fn wb_raw(i: u32) -> vec4<u32> { return vec4<u32>(0u); }
fn norm1(c: u32) -> f32 { return select(0.0, norm_w.d[min(c, pc.cols - 1u)], c < pc.cols); }
