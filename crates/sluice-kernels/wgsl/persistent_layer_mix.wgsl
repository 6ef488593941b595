//! variants: q4_k__q6_k q5_k__q6_k
//! include: attention_chunk
//! include: attention_core
//! include: attention_finish
//! include: rope
//! include: rope_ext
//! include: attention_rope_body
//! include: persistent_layer_body
//! include: persistent_stage
//! include: persistent_ops_two
//! include: persistent_matvec_q
//! second: persistent_matvec_q
// One decoder layer of a decode step in one dispatch (include/persistent_layer_body.wgsl)
// for a layer of two block formats, variant A__B: q, k (stacked), o, gate and up in A,
// v and down in B (llama.cpp's Q4_K_M and Q5_K_M mixtures; include/persistent_ops_two.wgsl).
// The unit loop with the next unit's loads ahead (units_piped): the two-format kernel's
// code costs (0.6B Q4_K_M on the H100: 912.0 / 914.7 -> 929.9 / 933.3 tok/s; Q4_K as one
// format lost 1052.6 -> 1024.0 the same way, so persistent_layer_q keeps units_paired).
const UNIT_PIPE: bool = true;
// Attention items of every split of the capacity (include/persistent_layer_body.wgsl): counting
// only those the context reaches, which leaves more workgroups to warm L2, ran slower here
// in every pair of two calls (H200, Qwen3-0.6B Q4_K_M tg128, alternated processes: 1012 ->
// 1000 in the forty-sixth session; 1012.6 / 1012.5 -> 1000.6 / 972.9 in the forty-seventh).
const ITEMS_BY_CONTEXT: bool = false;
