//! variants: f16 bf16 f32
//! include: matvec_batch_body
//! include: matvec_pair_norm_io
// Batched-decode variant of matvec_silu_norm: see include/matvec_batch_body.wgsl.
const SILU: bool = true;
