//! include: batch_y_pairs
//! include: half_bits
//! include: matvec_batch_cmd_f16_body
//! include: matvec_batch_cmd_f16_split
//! include: matvec_batch_split_out
//! include: matvec_batch_staged_io
//! include: matvec_batch_both_io
enable f16;
enable wgpu_cooperative_matrix;
// matvec_batch_cmd_f16 with K split over workgroups (the batched engine's f16 matrices;
// push constants and layout as matvec_batch_cmdq, `kchunks` counting stages of 128
// columns), plain and gated in one kernel (include/matvec_batch_both_io.wgsl): y[t, r] =
// (y_mode Y_ADD ? y[t, r] : 0) + W[r] . xh[t], or gated y[t, r] = silu(Wg[r] . xh[t]) *
// (Wu[r] . xh[t]), gate and up in the one binding w, as f16 pairs (Y_F16_PAIRS, down's
// input) or f32. The batched decode steps' kernel, so that a layer's matrices run the same
// code (the GPU's instruction cache; decision 0019); single-sequence prefill chunks keep
// matvec_batch_cmdk_f16[_silu]. See include/matvec_batch_cmd_f16_body.wgsl.
const NTT: u32 = 2u;
