//! variants: f16 bf16 f32 q8_0_dp q4_0_dp q4_k_dp q6_k_dp q4_1_dp q5_0_dp q5_1_dp q5_k_dp
//! include: matvec_body
//! include: matvec_norm_io
//! include: matvec_no_pick
// matvec_norm for the LM head on a grid smaller than the matrix (matvec_resident_grid):
// each workgroup takes every n-th block of rows (ROW_LOOP; the integer-dot variants
// quantize x once for all of them). A kernel of its own: with the row loop in every
// matvec of the family, Qwen3-4B Q4_K_M decode (full grids) fell 376 -> 362 tok/s on the
// H100.
const X_Q8: bool = false;
const BATCHED: bool = false;
const ROW_LOOP: bool = true;
