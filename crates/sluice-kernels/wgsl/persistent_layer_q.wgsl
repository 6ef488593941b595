//! variants: q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k
//! include: attention_chunk
//! include: attention_core
//! include: attention_finish
//! include: rope
//! include: rope_ext
//! include: attention_rope_body
//! include: persistent_layer_body
//! include: persistent_stage
//! include: persistent_ops_one
//! include: persistent_matvec_q
// One decoder layer of a decode step in one dispatch (include/persistent_layer_body.wgsl)
// for a layer whose five matrices share one block format, decoded in registers
// (include/persistent_matvec_q.wgsl).
const UNIT_PIPE: bool = false;
// Attention items of only the splits the context reaches (include/persistent_layer_body.wgsl;
// H200, Qwen3-0.6B tg128: Q8_0 1069 -> 1097 tok/s, Q4_0 1122 -> 1152; BENCHMARKS.md,
// forty-sixth session).
const ITEMS_BY_CONTEXT: bool = true;
