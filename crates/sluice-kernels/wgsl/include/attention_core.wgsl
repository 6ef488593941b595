// The attention core shared by attention_split and attention_rope: given the scaled query
// in `qs`, positions [start, start + n) of one kv head (first u32 at row0) and the output
// slot obase, computes scores (16 lanes per position, coalesced key reads), the chunk's max
// and exp-sum, and the weighted values (four value loads in flight per invocation), and
// writes partial[obase..] = (m, l, o[hd]). Expects bindings kcache, vcache, partial, attn.

const SLICES: u32 = 16u;
const NEG: f32 = -3.0e38;

var<workgroup> qs: array<vec2<f32>, 128>;
var<workgroup> part: array<f32, 4096>; // 256 positions x SLICES
var<workgroup> sc: array<f32, 256>;
var<workgroup> ov: array<vec2<f32>, 256>;
var<workgroup> red: array<f32, 256>;

// `alone`: this is the only split holding keys, so it also writes the normalised output to
// attn[out..] itself (bit-identical to the combine of one partial: exp(m - m) = 1) and the
// caller skips the ticket and the combine.
fn attend(tid: u32, sg_id: u32, sg_lane: u32, nsg: u32, row0: u32, n: u32, obase: u32, pairs: u32,
          alone: bool, out: u32) {
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
        if (alone) {
            let inv = 1.0 / l;
            attn.d[out + 2u * tid] = acc.x * inv;
            attn.d[out + 2u * tid + 1u] = acc.y * inv;
        }
    }
    if (tid == 0u) {
        partial.d[obase] = m;
        partial.d[obase + 1u] = l;
    }
}
