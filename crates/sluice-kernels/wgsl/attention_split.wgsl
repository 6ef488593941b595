// Decode attention, split over the sequence. Workgroup (s, h) covers positions
// [s*chunk, min((s+1)*chunk, seq_len)) for query head h (kv head h / (heads/kv_heads))
// and writes partial[h, s] = (o[hd] = sum e^(score-m) v, m = max score, l = sum e^(score-m)),
// score = scale * q.k. K and V caches are f16 pairs, [kv_heads, capacity, head_dim].
struct F32s { d: array<f32> }
struct U32s { d: array<u32> }
struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct Push { heads: u32, kv_heads: u32, head_dim: u32, capacity: u32, chunk: u32, splits: u32, scale: f32, pad: u32 }

@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> q: F32s;
@group(0) @binding(2) var<storage, read> kcache: U32s;
@group(0) @binding(3) var<storage, read> vcache: U32s;
@group(0) @binding(4) var<storage, read_write> partial: F32s;
var<immediate> pc: Push;

const WG: u32 = 128u;
var<workgroup> qs: array<f32, 256>;
var<workgroup> sc: array<f32, 256>;
var<workgroup> red: array<f32, 128>;

fn reduce_max(v: f32, t: u32, sg: u32, sgi: u32) -> f32 {
    let m = subgroupMax(v);
    if (sgi == 0u) {
        red[t / sg] = m;
    }
    workgroupBarrier();
    var r = -3.0e38;
    for (var i = 0u; i < WG / sg; i++) {
        r = max(r, red[i]);
    }
    workgroupBarrier();
    return r;
}

fn reduce_sum(v: f32, t: u32, sg: u32, sgi: u32) -> f32 {
    let m = subgroupAdd(v);
    if (sgi == 0u) {
        red[t / sg] = m;
    }
    workgroupBarrier();
    var r = 0.0;
    for (var i = 0u; i < WG / sg; i++) {
        r += red[i];
    }
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32,
        @builtin(subgroup_size) sg: u32, @builtin(subgroup_invocation_id) sgi: u32) {
    let s = wg.x;
    let h = wg.y;
    let hd = pc.head_dim;
    let half = hd / 2u;
    let kvh = h / (pc.heads / pc.kv_heads);
    let start = s * pc.chunk;
    let end = min(start + pc.chunk, params.seq_len);
    let out = (h * pc.splits + s) * (hd + 2u);
    if (start >= end) {
        for (var d = t; d < hd; d += WG) {
            partial.d[out + d] = 0.0;
        }
        if (t == 0u) {
            partial.d[out + hd] = -3.0e38;
            partial.d[out + hd + 1u] = 0.0;
        }
        return;
    }
    for (var d = t; d < hd; d += WG) {
        qs[d] = q.d[h * hd + d] * pc.scale;
    }
    workgroupBarrier();
    let n = end - start;
    let kv_base = (kvh * pc.capacity + start) * half;
    var local_max = -3.0e38;
    for (var p = t; p < n; p += WG) {
        let row = kv_base + p * half;
        var dotv = 0.0;
        for (var j = 0u; j < half; j++) {
            let kk = unpack2x16float(kcache.d[row + j]);
            dotv += qs[2u * j] * kk.x + qs[2u * j + 1u] * kk.y;
        }
        sc[p] = dotv;
        local_max = max(local_max, dotv);
    }
    let m = reduce_max(local_max, t, sg, sgi);
    var local_sum = 0.0;
    for (var p = t; p < n; p += WG) {
        let e = exp(sc[p] - m);
        sc[p] = e;
        local_sum += e;
    }
    let l = reduce_sum(local_sum, t, sg, sgi);
    // o[2j], o[2j+1] for word j = t (head_dim <= 256).
    if (t < half) {
        var o = vec2<f32>(0.0, 0.0);
        for (var p = 0u; p < n; p++) {
            o += sc[p] * unpack2x16float(vcache.d[kv_base + p * half + t]);
        }
        partial.d[out + 2u * t] = o.x;
        partial.d[out + 2u * t + 1u] = o.y;
    }
    if (t == 0u) {
        partial.d[out + hd] = m;
        partial.d[out + hd + 1u] = l;
    }
}
