//! include: batch_y_f32
//! include: half_bits
//! include: matmul_tile_f16_body
enable f16;
enable wgpu_cooperative_matrix;
// A prefill chunk's f16 matrix as a tiled matmul, 128 rows x 128 tokens a workgroup:
// y[t, r] (stored or added to) = W[r] . xh[t]. See include/matmul_tile_f16_body.wgsl.
@group(0) @binding(0) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> xv: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
struct Push { rows: u32, cols: u32, w_stride: u32, tokens: u32, x_stride: u32, y_stride: u32, y_mode: u32, row_groups_x: u32 }
var<immediate> pc: Push;

const SILU: bool = false;
// Only the gated kernel has a second matrix (never called here).
fn wb_raw(i: u32) -> vec4<u32> {
    return vec4<u32>(0u);
}
