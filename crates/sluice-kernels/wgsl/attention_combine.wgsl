//! include: attention_chunk
// Decode attention, second pass: combines the per-split partials of attention_split.
// With y workgroups (prefill), token t's output is written after token t-1's.
// Dispatch [heads, 1, 1], workgroup 256 (one invocation per output element, strided).
//   out[h, :] = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M),  M = max_s m_s,
// over the splits that hold positions (s < ceil(seq_len / chunk), chunk =
// attn_chunk(seq_len): include/attention_chunk.wgsl).

struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct F32s { d: array<f32> }
struct Push {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    capacity: u32,
    chunk: u32,
    splits: u32,
    scale: f32,
    q_stride: u32,
}

@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> partial: F32s;
@group(0) @binding(2) var<storage, read_write> attn: F32s;
var<immediate> pc: Push;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let h = wg.x;
    let t = wg.y; // token (prefill)
    let hd = pc.head_dim;
    let stride = hd + 2u;
    let first = (t * pc.heads + h) * pc.splits * stride;
    let seq = min(params.seq_len + t, pc.capacity);
    let chunk = attn_chunk(seq);
    let used = min((seq + chunk - 1u) / chunk, pc.splits);
    var mx = -3.0e38;
    for (var s = 0u; s < used; s++) {
        mx = max(mx, partial.d[first + s * stride]);
    }
    var l = 0.0;
    for (var s = 0u; s < used; s++) {
        let b = first + s * stride;
        l += partial.d[b + 1u] * exp(partial.d[b] - mx);
    }
    let inv = 1.0 / l;
    for (var d = tid; d < hd; d += 256u) {
        var o = 0.0;
        for (var s = 0u; s < used; s++) {
            let b = first + s * stride;
            o += partial.d[b + 2u + d] * exp(partial.d[b] - mx);
        }
        attn.d[(t * pc.heads + h) * hd + d] = o * inv;
    }
}
