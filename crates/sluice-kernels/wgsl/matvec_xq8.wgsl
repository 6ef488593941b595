//! variants: q8_0_dp q4_0_dp q4_k_dp q6_k_dp q4_1_dp q5_0_dp q5_1_dp q5_k_dp
//! include: matvec_body
//! include: matvec_plain_io
//! include: matvec_no_pick
// y[r] = (accumulate ? y[r] : 0) + W[r] . x on integer dot products with x already
// quantized: the q8 records a producer wrote (push field q8_at, the quantized handoff of
// include/matvec_q8_body.wgsl), so no x step. The integer-dot block formats only.
const X_Q8: bool = true;
const BATCHED: bool = false;
const ROW_LOOP: bool = false;
