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
// is include/attention_rope_body.wgsl (the persistent layer kernel calls it too).
struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct F32s { d: array<f32> }
struct U32s { d: array<u32> }
struct Counters { d: array<atomic<u32>> }
struct Push {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    capacity: u32,
    chunk: u32,
    splits: u32,
    scale: f32,
    flags: u32,
    eps: f32,
    theta: f32,
    k_offset: u32,
    v_offset: u32,
}

@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> qkv: F32s;
@group(0) @binding(2) var<storage, read> q_norm: F32s;
@group(0) @binding(3) var<storage, read> k_norm: F32s;
@group(0) @binding(4) var<storage, read_write> kcache: U32s;
@group(0) @binding(5) var<storage, read_write> vcache: U32s;
@group(0) @binding(6) @coherent var<storage, read_write> partial: F32s;
@group(0) @binding(7) var<storage, read_write> counters: Counters;
@group(0) @binding(8) var<storage, read_write> attn: F32s;
var<immediate> pc: Push;

// No q/k/v biases and no RoPE scaling in this kernel (attention_rope_ext has them).
const ROPE_EXT: bool = false;
fn rope_bias_kv(kvh: u32, tid: u32) -> vec4<f32> { return vec4<f32>(0.0); }
fn rope_bias_q(h: u32, tid: u32) -> vec2<f32> { return vec2<f32>(0.0); }
fn rope_freq_mul(tid: u32) -> f32 { return 1.0; }


@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(num_subgroups) nsg: u32,
) {
    attention_rope_wg(wg.x, wg.y, tid, sg_id, sg_lane, nsg);
}
