//! include: batch_y_pairs
//! include: half_bits
//! include: matvec_batch_cmd_f16_body
//! include: matvec_batch_cmd_f16_out
enable f16;
enable wgpu_cooperative_matrix;
// matvec_batch_cmd_f16_silu with 64 tokens per workgroup (NTT = 4; a prefill chunk's f16
// gate/up pairs, `matvec_batch_cmd_prefill`): each weight operand built once for four
// token tiles. See include/matvec_batch_cmd_f16_body.wgsl.
@group(0) @binding(0) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> w_b: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> xv: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> y: array<u32>; // include/batch_y_pairs.wgsl
struct Push { rows: u32, cols: u32, w_stride: u32, tokens: u32, x_stride: u32, y_stride: u32, y_mode: u32, row_groups_x: u32 }
var<immediate> pc: Push;
const NTT: u32 = 4u;
const SILU: bool = true;
fn silu() -> bool {
    return SILU;
}
fn wb_raw(i: u32) -> vec4<u32> {
    return w_b[i];
}
