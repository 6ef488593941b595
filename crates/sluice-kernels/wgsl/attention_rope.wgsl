//! include: attention_rope_io
//! include: attention_chunk
//! include: attention_core
//! include: attention_finish
//! include: rope
//! include: attention_rope_body
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

// No q/k/v biases and no RoPE scaling in this kernel (attention_rope_ext has them), and no
// q8 output (attention_rope_q8 has it).
const ROPE_EXT: bool = false;
// A head's output is written (include/attention_core.wgsl): o reads the floats.
fn attn_written(tid: u32, out: u32, hd: u32, staged: bool) {}
fn rope_bias_kv(kvh: u32, tid: u32) -> vec4<f32> { return vec4<f32>(0.0); }
fn rope_bias_q(h: u32, tid: u32) -> vec2<f32> { return vec2<f32>(0.0); }
fn rope_freq_mul(tid: u32) -> f32 { return 1.0; }
