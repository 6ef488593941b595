//! include: attention_prefill_io
//! include: half_bits
//! include: attention_prefill_cm_body
enable f16;
enable wgpu_cooperative_matrix;
// Causal attention over a prefill chunk on the matrix units, head_dim 128: what
// attention_prefill.wgsl computes (same bindings, push constants, positions and bounds),
// with the scores Q K^T and the weighted values P V as 16 x 16 x 16 f16 products with f32
// sums (decision 0017). Dispatch [ceil(tokens / 64), heads, 1]
// (`sluice_kernels::attention_prefill_kernel`), workgroup 128 = 4 subgroups of 32; only
// where `DeviceInfo::coopmat_f16_16x16` holds. attention_prefill_cm64 is the same for
// heads of 64 dims (include/attention_prefill_cm_body.wgsl).
//
// A workgroup takes 64 queries of one head, subgroup s the 16 from q0 + 16 s; its q rows
// (times the scale, as f16) stay in registers as HD / 16 use-A matrices. Keys and values
// go through workgroup memory as f16 in tiles of 32 positions ([position][dim], rows
// padded to KS halves). Two passes over the tiles the block's last query reaches: the
// first takes each row's largest score, the second its weights exp(s - max) (as f16, a
// use-A matrix per 16 keys), their sum and P V into HD / 16 accumulators of 16 dims; so no
// partial output is ever rescaled. Lane l of a subgroup owns row l / 2 and keys 16 (l % 2)
// .. + 15 of a tile for the softmax (the two lanes of a row combine by one shuffle, in a
// fixed order).
const HD: u32 = 128u;
const KS: u32 = 136u; // halves per staged row (8 of padding)
