//! include: batch_attention_body
//! include: batch_attention_gqa_heads
//! include: batch_attention_caches
// The batched decode attention (include/batch_attention_body.wgsl) with the query heads of
// one key/value head in one workgroup (include/batch_attention_gqa_heads.wgsl), over caches
// it only reads, the query as batch_rope left it (include/batch_attention_caches.wgsl).
