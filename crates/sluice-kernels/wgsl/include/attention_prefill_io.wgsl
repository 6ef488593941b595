// What the prefill attention kernels share (attention_prefill.wgsl, attention_prefill_cm.wgsl
// and attention_prefill_cm64.wgsl; `sluice_kernels::AttnPrefillPush`): the params, the queries, the
// output and the push constants. Each kernel declares bindings 2 and 3 (the key and value
// caches, f16 pairs) in the word width it reads.

struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct F32s { d: array<f32> }
struct Push {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    capacity: u32,
    tokens: u32,
    q_stride: u32,
    o_stride: u32,
    scale: f32,
}

@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> q: F32s;
@group(0) @binding(4) var<storage, read_write> out: F32s;
var<immediate> pc: Push;
