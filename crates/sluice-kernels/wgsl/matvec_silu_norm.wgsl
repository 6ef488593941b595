//! variants: f16 bf16 f32 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k q8_0_dp q4_0_dp q4_k_dp q6_k_dp q4_1_dp q5_0_dp q5_1_dp q5_k_dp
//! include: matvec_body
//! include: matvec_no_pick
//! include: matvec_pair_norm_io
// RMSNorm + gate/up + SiLU·mul in one dispatch: with x' = x * norm_w * inv,
// y[r] = silu(Wg[r] . x') * (Wu[r] . x'). See include/matvec_body.wgsl.
const SILU: bool = true;
const X_Q8: bool = false;
const BATCHED: bool = false;
const ROW_LOOP: bool = false;
