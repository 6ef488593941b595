//! include: attention_prefill_io
//! include: half_bits
//! include: attention_prefill_cm_body
enable f16;
enable wgpu_cooperative_matrix;
// Causal attention over a prefill chunk on the matrix units for heads of 64 dims (SmolLM2,
// Llama 3.2 1B): attention_prefill_cm.wgsl with HD = 64 (4 use-A matrices of queries and
// 4 accumulators a subgroup; include/attention_prefill_cm_body.wgsl). Same bindings, push
// constants and dispatch [ceil(tokens / 64), heads, 1].
const HD: u32 = 64u;
const KS: u32 = 72u; // halves per staged row (8 of padding)
