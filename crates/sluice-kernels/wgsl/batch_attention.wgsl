//! include: batch_attention_body
//! include: batch_attention_one_head
//! include: batch_attention_caches
// The batched decode attention (include/batch_attention_body.wgsl) over
// caches it only reads, the query as batch_rope left it
// (include/batch_attention_caches.wgsl).
