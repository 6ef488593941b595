//! include: attention_rope_io
//! include: quant_x8
//! include: attention_q8
//! include: attention_chunk
//! include: attention_core
//! include: attention_finish
//! include: rope
//! include: attention_rope_body
// attention_rope with its output also written as q8 records (see below).
// Decode attention with the q/k RMSNorm, rotary embedding and KV append folded in (one
// dispatch and one barrier less per layer than qk_norm_rope + attention_split).
// Dispatch [splits, heads, 1], workgroup 256. Input: the raw q | k | v projections in one
// buffer (q at 0, k at k_offset, v at v_offset floats). Every workgroup (s, h) computes
// rope(norm(q_h)) itself; the workgroup whose range holds params.pos also writes
// f16(rope(norm(k))) and f16(v) of its kv head at pos into the caches before reading them.
// Then as attention_split: partial[h, s] = (m, l, o[hd]) over its positions, and the last
// non-empty split of head h to finish merges the partials into attn[h] (counters: one u32
// per head, zero before the dispatch and left zero after it); a lone non-empty split writes
// attn[h] itself (see include/attention_core.wgsl). Empty splits return at once. The body
// is include/attention_rope_body.wgsl (the persistent layer kernel calls it too), the
// bindings and entry point include/attention_rope_io.wgsl.

// No q/k/v biases and no RoPE scaling in this kernel (attention_rope_ext has them).
const ROPE_EXT: bool = false;
// Each head's output also as q8 records for an integer-dot o (push field q8_at,
// include/attention_q8.wgsl). A kernel of its own so that attention_rope carries none of
// it (H100, Qwen3-0.6B Q4_K_M tg128: 800.8 -> 797.4 tok/s with the code behind a
// push-field branch in every model's kernel; BENCHMARKS.md, twenty-ninth session).
fn rope_bias_kv(kvh: u32, tid: u32) -> vec4<f32> { return vec4<f32>(0.0); }
fn rope_bias_q(h: u32, tid: u32) -> vec2<f32> { return vec2<f32>(0.0); }
fn rope_freq_mul(tid: u32) -> f32 { return 1.0; }
