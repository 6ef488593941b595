//! include: attention_chunk
//! include: attention_core
//! include: attention_finish
//! include: rope
//! include: rope_ext
//! include: attention_rope_body
//! include: persistent_layer_body
//! include: persistent_stage
//! include: persistent_ops_one
//! include: persistent_matvec_f16
// One decoder layer of a decode step in one dispatch: see include/persistent_layer_body.wgsl.
// Four weight loads in flight per invocation and batch (best for Qwen3-0.6B shapes).
const BATCH: u32 = 4u;
// Attention items of only the splits the context reaches (include/persistent_layer_body.wgsl;
// H200, Qwen3-0.6B f16: tg128 unchanged, 996 -> 995 tok/s, 512..576 866 -> 874;
// BENCHMARKS.md, forty-sixth session).
const ITEMS_BY_CONTEXT: bool = true;
