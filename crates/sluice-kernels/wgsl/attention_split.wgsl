// Decode attention, split over the sequence (flash-decoding, first pass).
// Dispatch [splits, heads, 1], workgroup 256. Workgroup (s, h) covers positions
// [s*chunk, min((s+1)*chunk, seq_len)) (chunk <= 256, head_dim even and <= 256) for query
// head h and kv head h / (heads / kv_heads), and writes, unnormalised,
//   partial[h, s, :] = (m = max score, l = sum exp(score - m), o[hd] = sum exp(score - m) v)
// with score = scale * q . k. An empty range writes m = -3e38, l = 0, o = 0 and returns
// at once. Caches: f16 pairs in u32, [kv_heads, capacity, head_dim].
//
// Scores: 16 lanes per position, each reading every 16th u32 of the key (coalesced); the
// 16 partial sums go to shared memory and are added after one barrier. Values: one lane
// per u32 column (f16 pair), 256 / (hd/2) position groups, summed in shared memory.

struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct F32s { d: array<f32> }
struct U32s { d: array<u32> }
struct Push {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    capacity: u32,
    chunk: u32,
    splits: u32,
    scale: f32,
    pad: u32,
}

@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> q: F32s;
@group(0) @binding(2) var<storage, read> kcache: U32s;
@group(0) @binding(3) var<storage, read> vcache: U32s;
@group(0) @binding(4) var<storage, read_write> partial: F32s;
var<immediate> pc: Push;

const SLICES: u32 = 16u;
const NEG: f32 = -3.0e38;

var<workgroup> qs: array<vec2<f32>, 128>;
var<workgroup> part: array<f32, 4096>; // 256 positions x SLICES
var<workgroup> sc: array<f32, 256>;
var<workgroup> ov: array<vec2<f32>, 256>;
var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(num_subgroups) nsg: u32,
) {
    let s = wg.x;
    let h = wg.y;
    let hd = pc.head_dim;
    let pairs = hd / 2u;
    let obase = (h * pc.splits + s) * (hd + 2u);
    let seq = min(params.seq_len, pc.capacity);
    let start = s * pc.chunk;
    if (start >= seq) {
        for (var i = tid; i < hd + 2u; i += 256u) {
            partial.d[obase + i] = select(0.0, NEG, i == 0u);
        }
        return;
    }
    let n = min(seq - start, pc.chunk);
    let kvh = h / (pc.heads / pc.kv_heads);
    // First u32 of position `start` of this kv head.
    let row0 = (kvh * pc.capacity + start) * pairs;

    if (tid < pairs) {
        let qb = h * hd + 2u * tid;
        qs[tid] = vec2<f32>(q.d[qb], q.d[qb + 1u]) * pc.scale;
    }
    workgroupBarrier();

    // Scores.
    let slice = tid % SLICES;
    for (var pb = 0u; pb < n; pb += 256u / SLICES) {
        let p = pb + tid / SLICES;
        if (p < n) {
            let row = row0 + p * pairs;
            var acc = 0.0;
            for (var d = slice; d < pairs; d += SLICES) {
                acc += dot(qs[d], unpack2x16float(kcache.d[row + d]));
            }
            part[p * SLICES + slice] = acc;
        }
    }
    workgroupBarrier();
    var score = NEG;
    if (tid < n) {
        var acc = 0.0;
        for (var j = 0u; j < SLICES; j++) {
            acc += part[tid * SLICES + j];
        }
        score = acc;
    }

    // Max and exp-sum over the chunk.
    let smax = subgroupMax(score);
    if (sg_lane == 0u) {
        red[sg_id] = smax;
    }
    workgroupBarrier();
    var m = NEG;
    for (var j = 0u; j < nsg; j++) {
        m = max(m, red[j]);
    }
    let e = select(0.0, exp(score - m), tid < n);
    sc[tid] = e;
    workgroupBarrier(); // everyone has read red (the max) and written sc
    let ssum = subgroupAdd(e);
    if (sg_lane == 0u) {
        red[sg_id] = ssum;
    }
    workgroupBarrier();
    var l = 0.0;
    for (var j = 0u; j < nsg; j++) {
        l += red[j];
    }

    // Weighted values.
    let groups = 256u / pairs;
    let col = tid % pairs;
    let grp = tid / pairs;
    // Four independent accumulators keep four value loads in flight per invocation.
    var o0 = vec2<f32>(0.0);
    var o1 = vec2<f32>(0.0);
    var o2 = vec2<f32>(0.0);
    var o3 = vec2<f32>(0.0);
    if (grp < groups) {
        var p = grp;
        for (; p + 3u * groups < n; p += 4u * groups) {
            let v0 = vcache.d[row0 + p * pairs + col];
            let v1 = vcache.d[row0 + (p + groups) * pairs + col];
            let v2 = vcache.d[row0 + (p + 2u * groups) * pairs + col];
            let v3 = vcache.d[row0 + (p + 3u * groups) * pairs + col];
            o0 += sc[p] * unpack2x16float(v0);
            o1 += sc[p + groups] * unpack2x16float(v1);
            o2 += sc[p + 2u * groups] * unpack2x16float(v2);
            o3 += sc[p + 3u * groups] * unpack2x16float(v3);
        }
        for (; p < n; p += groups) {
            o0 += sc[p] * unpack2x16float(vcache.d[row0 + p * pairs + col]);
        }
    }
    ov[tid] = (o0 + o1) + (o2 + o3);
    workgroupBarrier();
    if (tid < pairs) {
        var acc = vec2<f32>(0.0);
        for (var g = 0u; g < groups; g++) {
            acc += ov[g * pairs + tid];
        }
        partial.d[obase + 2u + 2u * tid] = acc.x;
        partial.d[obase + 3u + 2u * tid] = acc.y;
    }
    if (tid == 0u) {
        partial.d[obase] = m;
        partial.d[obase + 1u] = l;
    }
}
