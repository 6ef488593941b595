//! variants: f16 bf16 f32
//! include: matvec_batch_body
//! include: matvec_norm_io
// Batched-decode variant of matvec_norm: see include/matvec_batch_body.wgsl.
