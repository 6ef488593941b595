// The bindings, push constants and entry point of attention_rope, attention_rope_q8 and
// attention_rope_ext (bindings 0..=8; the _ext kernel adds 9 and 10). See
// attention_rope.wgsl.
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
    // attention_rope_q8: attn also gets the output's q8 records from this float on
    // (include/attention_q8.wgsl; the other kernels ignore it).
    q8_at: u32,
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
