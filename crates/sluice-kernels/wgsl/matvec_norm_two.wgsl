//! variants: q4_k_dp__q6_k_dp q5_k_dp__q6_k_dp
//! include: matvec_body
//! include: matvec_two_hooks
//! include: matvec_pair_norm_io
//! second: quant_dp
// RMSNorm feeding a matvec over two matrices of two block formats in one dispatch (a
// layer's q|k in Q4_K or Q5_K and its v in Q6_K, as llama.cpp's K_M mixtures make them):
// y[r] = inv * W[r] . (x * norm_w) for the first matrix's rows, y[second_y + r] = inv *
// W_b[r] . (x * norm_w) for the second's, x quantized once per workgroup as in matvec_norm.
// Both matrices run the same plan (push field tpr); workgroups from second_first take the
// second matrix. See include/matvec_q8_body.wgsl and include/matvec_two_hooks.wgsl.
const SILU: bool = false;
const X_Q8: bool = false;
const BATCHED: bool = false;
const ROW_LOOP: bool = false;
