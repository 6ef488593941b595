//! include: attention_rope_io
//! include: attention_chunk
//! include: attention_core
//! include: attention_finish
//! include: rope
//! include: rope_ext
//! include: attention_rope_body
// attention_rope (see there) for models with q/k/v biases (Qwen2) or RoPE scaling
// (Llama 3.1): bindings 9 (biases, q | k | v packed) and 10 (inv_freq multipliers), read
// under the push flags ROPE_BIAS / ROPE_FREQ (include/rope_ext.wgsl). A kernel of its own
// so that models with neither bind and branch on nothing more (on the H100 the extra
// branches and bindings cost the plain kernel ~0.45 us per dispatch). No q8 output.
// A head's output is written (include/attention_core.wgsl): o reads the floats.
fn attn_written(tid: u32, out: u32, hd: u32, staged: bool) {}
@group(0) @binding(9) var<storage, read> qkv_bias: F32s;
@group(0) @binding(10) var<storage, read> rope_freq: F32s;
