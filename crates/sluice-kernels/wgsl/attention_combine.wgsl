// out[h] = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M), M = max_s m_s; one workgroup per head.
struct F32s { d: array<f32> }
struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct Push { heads: u32, kv_heads: u32, head_dim: u32, capacity: u32, chunk: u32, splits: u32, scale: f32, pad: u32 }

@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> partial: F32s;
@group(0) @binding(2) var<storage, read_write> out: F32s;
var<immediate> pc: Push;

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let h = wg.x;
    let hd = pc.head_dim;
    let used = min(pc.splits, (params.seq_len + pc.chunk - 1u) / pc.chunk);
    let base = h * pc.splits * (hd + 2u);
    var big_m = -3.0e38;
    for (var s = 0u; s < used; s++) {
        big_m = max(big_m, partial.d[base + s * (hd + 2u) + hd]);
    }
    var l = 0.0;
    for (var s = 0u; s < used; s++) {
        let p = base + s * (hd + 2u);
        l += partial.d[p + hd + 1u] * exp(partial.d[p + hd] - big_m);
    }
    for (var d = t; d < hd; d += 128u) {
        var o = 0.0;
        for (var s = 0u; s < used; s++) {
            let p = base + s * (hd + 2u);
            o += partial.d[p + d] * exp(partial.d[p + hd] - big_m);
        }
        out.d[h * hd + d] = o / l;
    }
}
