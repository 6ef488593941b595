//! include: matvec_batch_cmdq_body
//! include: matvec_batch_cmdq_q4_k
//! include: matvec_batch_staged_io
//! include: batch_y_pairs
//! include: matvec_batch_both_io
enable f16;
enable wgpu_cooperative_matrix;
// The batched Q4_K matvec with the weights' matrix-unit operands built in registers, plain
// and gated in one kernel (include/matvec_batch_both_io.wgsl): y[t, r] = (Y_ADD ? y[t, r]
// : 0) + W[r] . xh[t], or gated y[t, r] = silu(Wg[r] . xh[t]) * (Wu[r] . xh[t]), gate and
// up in the one binding w, so no weight load picks a binding at run time. The batched
// decode steps' and prefill chunks' Q4_K kernel: a layer's q|k|v, o, gate/up and down run
// the same code, where a step cycling through more kernel code than the GPU's instruction
// cache holds pays at every switch (decision 0019); matvec_batch_cmd_q4_k[_silu] where a
// gate/up pair cannot be bound as one range. See include/matvec_batch_cmdq_body.wgsl.
const NTT: u32 = 2u;
const SG: u32 = 4u;
