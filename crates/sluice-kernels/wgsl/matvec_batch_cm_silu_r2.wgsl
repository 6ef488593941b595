//! include: matvec_batch_cm_body
//! include: matvec_batch_cm_epilogue
//! include: batch_y_pairs
enable f16;
enable wgpu_cooperative_matrix;
// matvec_batch_cm_silu with two row tiles per workgroup (large matrices) and 8 subgroups.
// See include/matvec_batch_cm_body.wgsl.
@group(0) @binding(0) var<storage, read> w: array<f16>;
@group(0) @binding(1) var<storage, read> w_b: array<f16>;
@group(0) @binding(2) var<storage, read> xh: array<f16>;
@group(0) @binding(3) var<storage, read_write> y: array<u32>; // include/batch_y_pairs.wgsl
var<immediate> pc: Push;
const SG: u32 = 8u;
const SILU: bool = true;
const RT: u32 = 2u;
