// Bindings and push constants of the batched paged attention kernels (batch_attention,
// batch_attention_gqa; `sluice_kernels::BatchAttnPush`), and their cache loads in batches
// (the kernel declares `slots`).
struct F32s { d: array<f32> }
struct U32s { d: array<u32> }
struct U32x4s { d: array<vec4<u32>> }
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
// The same caches as vec4s (bound again: 16-byte loads where a row's words start on a
// 16-byte boundary, i.e. head_dim a multiple of 8).
@group(0) @binding(6) var<storage, read> kcache4: U32x4s;
@group(0) @binding(7) var<storage, read> vcache4: U32x4s;
var<immediate> pc: Push;

// Key pairs at .. at + 15 (f16 pairs as f32; `at` a multiple of 4), all loaded before
// any is used, so the four 16-byte loads are in flight together (a loop that uses each
// load first waits for every one).
fn key_pairs16(at: u32) -> array<vec2<f32>, 16> {
    var kk: array<vec2<f32>, 16>;
    for (var i = 0u; i < 4u; i++) {
        let v = kcache4.d[at / 4u + i];
        kk[4u * i] = unpack2x16float(v.x);
        kk[4u * i + 1u] = unpack2x16float(v.y);
        kk[4u * i + 2u] = unpack2x16float(v.z);
        kk[4u * i + 3u] = unpack2x16float(v.w);
    }
    return kk;
}

// Value pairs 4g .. 4g + 3 of the tile's keys jj + u nl (u = 0..3; cache rows from the
// kernel's `slots`; pairs a multiple of 4), loaded together: [4u + k] = key u's pair 4g + k.
fn value_pairs4x4(jj: u32, nl: u32, kv0: u32, pairs: u32, g: u32) -> array<vec2<f32>, 16> {
    var vv: array<vec2<f32>, 16>;
    for (var u = 0u; u < 4u; u++) {
        let v = vcache4.d[((kv0 + slots[jj + u * nl]) * pairs + 4u * g) / 4u];
        vv[4u * u] = unpack2x16float(v.x);
        vv[4u * u + 1u] = unpack2x16float(v.y);
        vv[4u * u + 2u] = unpack2x16float(v.z);
        vv[4u * u + 3u] = unpack2x16float(v.w);
    }
    return vv;
}
