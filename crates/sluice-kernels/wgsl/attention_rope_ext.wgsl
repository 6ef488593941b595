//! include: attention_core
//! include: attention_finish
//! include: rope
//! include: rope_ext
//! include: attention_rope_body
// attention_rope (see there) for models with q/k/v biases (Qwen2) or RoPE scaling
// (Llama 3.1): bindings 9 (biases, q | k | v packed) and 10 (inv_freq multipliers), read
// under the push flags ROPE_BIAS / ROPE_FREQ (include/rope_ext.wgsl). A kernel of its own
// so that models with neither bind and branch on nothing more (on the H100 the extra
// branches and bindings cost the plain kernel ~0.45 us per dispatch).
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
@group(0) @binding(9) var<storage, read> qkv_bias: F32s;
@group(0) @binding(10) var<storage, read> rope_freq: F32s;
var<immediate> pc: Push;


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
