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
