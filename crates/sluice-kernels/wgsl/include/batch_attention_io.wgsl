// Bindings and push constants of the batched paged attention kernels (batch_attention,
// batch_attention_gqa; `sluice_kernels::BatchAttnPush`), and their cache loads in batches
// (the kernel declares `slots`).
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

// Key pairs at .. at + 15 (f16 pairs as f32), all loaded before any is used, so the 16
// loads are in flight together (a loop that uses each load first waits for every one).
fn key_pairs16(at: u32) -> array<vec2<f32>, 16> {
    var kk: array<vec2<f32>, 16>;
    for (var i = 0u; i < 16u; i++) {
        kk[i] = unpack2x16float(kcache.d[at + i]);
    }
    return kk;
}

// Value pairs 4g .. 4g + 3 of the tile's keys jj + u nl (u = 0..3; cache rows from the
// kernel's `slots`), loaded together: [4u + k] = key u's pair 4g + k.
fn value_pairs4x4(jj: u32, nl: u32, kv0: u32, pairs: u32, g: u32) -> array<vec2<f32>, 16> {
    var vv: array<vec2<f32>, 16>;
    for (var u = 0u; u < 4u; u++) {
        let at = (kv0 + slots[jj + u * nl]) * pairs + 4u * g;
        for (var k = 0u; k < 4u; k++) {
            vv[4u * u + k] = unpack2x16float(vcache.d[at + k]);
        }
    }
    return vv;
}
