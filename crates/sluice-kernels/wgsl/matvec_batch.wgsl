//! variants: f16 bf16 f32
//! include: matvec_batch_body
//! include: matvec_plain_io
// Batched-decode variant of matvec: see include/matvec_batch_body.wgsl.
