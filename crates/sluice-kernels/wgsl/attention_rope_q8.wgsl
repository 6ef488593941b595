//! include: attention_rope_io
//! include: quant_x8
//! include: attention_q8
//! include: attention_chunk
//! include: attention_core
//! include: attention_finish
//! include: rope
//! include: attention_rope_body
// attention_rope (see there) with each head's output also written as q8 records for an
// integer-dot o (push field q8_at, include/attention_q8.wgsl). A kernel of its own so that
// attention_rope carries none of it (H100, Qwen3-0.6B Q4_K_M tg128: 800.8 -> 797.4 tok/s
// with the code behind a push-field branch in every model's kernel; BENCHMARKS.md,
// twenty-ninth session).

// No q/k/v biases and no RoPE scaling in this kernel (attention_rope_ext has them).
const ROPE_EXT: bool = false;
fn rope_bias_kv(kvh: u32, tid: u32) -> vec4<f32> { return vec4<f32>(0.0); }
fn rope_bias_q(h: u32, tid: u32) -> vec2<f32> { return vec2<f32>(0.0); }
fn rope_freq_mul(tid: u32) -> f32 { return 1.0; }
