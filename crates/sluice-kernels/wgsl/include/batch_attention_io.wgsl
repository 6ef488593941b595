// Bindings and push constants of the batched paged attention kernels (batch_attention,
// batch_attention_gqa; `sluice_kernels::BatchAttnPush`).
struct F32s { d: array<f32> }
struct U32s { d: array<u32> }
struct Push {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    capacity: u32,
    q_stride: u32,
    o_stride: u32,
    scale: f32,
    block: u32,
    max_blocks: u32,
}

@group(0) @binding(0) var<storage, read> rows: U32s;
@group(0) @binding(1) var<storage, read> table: U32s;
@group(0) @binding(2) var<storage, read> q: F32s;
@group(0) @binding(3) var<storage, read> kcache: U32s;
@group(0) @binding(4) var<storage, read> vcache: U32s;
@group(0) @binding(5) var<storage, read_write> out: F32s;
var<immediate> pc: Push;
