//! include: batch_attention_body
//! include: batch_attention_gqa_heads
//! include: batch_attention_rope
// batch_attention_gqa with batch_rope folded in, for decode-only steps: each
// workgroup norms and rotates its query heads and appends its row's key and value itself
// (include/batch_attention_rope.wgsl), bit for bit batch_rope then batch_attention_gqa.
