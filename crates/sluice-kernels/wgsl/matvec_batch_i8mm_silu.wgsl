//! variants: q4_k_mm
//! include: matvec_batch_i8mm_body
enable f16;
enable wgpu_cooperative_matrix;
// Gated batched matvec on int8 matrix units: y[t, r] = silu(G[r] . x_hat[t]) *
// (U[r] . x_hat[t]). See include/matvec_batch_i8mm_body.wgsl.
@group(0) @binding(0) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> w_b: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> xq: array<f32>;
@group(0) @binding(3) var<storage, read> xd: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
var<immediate> pc: Push;
const SILU: bool = true;
const WR: u32 = 32u;
fn wraw(sel: bool, i: u32) -> vec4<u32> {
    if (sel) {
        return w_b[i];
    }
    return w[i];
}
