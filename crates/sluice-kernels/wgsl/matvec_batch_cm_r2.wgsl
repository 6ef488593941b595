//! include: matvec_batch_cm_body
//! include: matvec_batch_cm_epilogue
//! include: batch_y_f32
enable f16;
enable wgpu_cooperative_matrix;
// matvec_batch_cm with two row tiles per workgroup (for large matrices: every activation
// tile loaded serves two weight tiles). See include/matvec_batch_cm_body.wgsl.
@group(0) @binding(0) var<storage, read> w: array<f16>;
@group(0) @binding(1) var<storage, read> xh: array<f16>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
var<immediate> pc: Push;
const SG: u32 = 16u;
const SILU: bool = false;
const RT: u32 = 2u;
// Never read (SILU is false): keeps one body for both kernels (workgroup memory, a valid
// cooperative-load source).
var<workgroup> w_b: array<f16, 256>;
