// The attention core shared by attention_split and attention_rope: given the scaled query
// in `qs`, positions [start, start + n) of one kv head (first u32 at row0) and the output
// slot obase, computes scores (16 lanes per position, coalesced key reads, two positions'
// words in flight per lane), the chunk's max and exp-sum, and the weighted values (eight
// value loads in flight per invocation), and
// writes partial[obase..] = (m, l, o[hd]). Expects bindings kcache, vcache, partial, attn,
// and `fn attn_written(tid, out, hd, staged)` from the kernel file: called by every
// invocation once a head's normalised output is in attn[out .. out + hd] (here, where it is
// also in sc[0 .. hd]: `staged`; or in finish_head).

const SLICES: u32 = 16u;
const NEG: f32 = -3.0e38;

var<workgroup> qs: array<vec2<f32>, 128>;
var<workgroup> part: array<f32, 4096>; // 256 positions x SLICES
var<workgroup> sc: array<f32, 256>;
var<workgroup> ov: array<vec2<f32>, 256>;
var<workgroup> red: array<f32, 256>;

// Lane `slice`'s part of a key's score: the words w (pairs slice, slice + SLICES, ...)
// times the query, summed in that order.
fn key_dot(w: ptr<function, array<u32, 8>>, slice: u32, pairs: u32) -> f32 {
    var acc = 0.0;
    for (var i = 0u; i < 8u; i++) {
        let d = slice + i * SLICES;
        if (d < pairs) {
            acc += dot(qs[d], unpack2x16float((*w)[i]));
        }
    }
    return acc;
}

// `alone`: this is the only split holding keys, so it also writes the normalised output to
// attn[out..] itself (bit-identical to the combine of one partial: exp(m - m) = 1) and the
// caller skips the ticket and the combine.
fn attend(tid: u32, sg_id: u32, sg_lane: u32, nsg: u32, row0: u32, n: u32, obase: u32, pairs: u32,
          alone: bool, out: u32) {
    // Scores. Two passes' key words (up to 8 per lane each) are loaded before any is used,
    // so they are in flight together; each lane then sums its words in d order.
    let slice = tid % SLICES;
    let step = 256u / SLICES;
    for (var pb = 0u; pb < n; pb += 2u * step) {
        let pa = pb + tid / SLICES;
        let pz = pa + step;
        var wa: array<u32, 8>;
        var wz: array<u32, 8>;
        for (var i = 0u; i < 8u; i++) {
            let d = slice + i * SLICES;
            if (d < pairs && pa < n) {
                wa[i] = kcache.d[row0 + pa * pairs + d];
            }
            if (d < pairs && pz < n) {
                wz[i] = kcache.d[row0 + pz * pairs + d];
            }
        }
        if (pa < n) {
            part[pa * SLICES + slice] = key_dot(&wa, slice, pairs);
        }
        if (pz < n) {
            part[pz * SLICES + slice] = key_dot(&wz, slice, pairs);
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
        // Eight value words loaded before any is used, then added as the loop below does.
        for (; p + 7u * groups < n; p += 8u * groups) {
            var v: array<u32, 8>;
            for (var i = 0u; i < 8u; i++) {
                v[i] = vcache.d[row0 + (p + i * groups) * pairs + col];
            }
            o0 += sc[p] * unpack2x16float(v[0]);
            o1 += sc[p + groups] * unpack2x16float(v[1]);
            o2 += sc[p + 2u * groups] * unpack2x16float(v[2]);
            o3 += sc[p + 3u * groups] * unpack2x16float(v[3]);
            o0 += sc[p + 4u * groups] * unpack2x16float(v[4]);
            o1 += sc[p + 5u * groups] * unpack2x16float(v[5]);
            o2 += sc[p + 6u * groups] * unpack2x16float(v[6]);
            o3 += sc[p + 7u * groups] * unpack2x16float(v[7]);
        }
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
            let o = acc * inv;
            attn.d[out + 2u * tid] = o.x;
            attn.d[out + 2u * tid + 1u] = o.y;
            // Also in sc (free since the barrier above) for attn_written's q8 records
            // (two workgroup stores per invocation; the kernels without them ignore it).
            sc[2u * tid] = o.x;
            sc[2u * tid + 1u] = o.y;
        }
    }
    if (tid == 0u) {
        partial.d[obase] = m;
        partial.d[obase + 1u] = l;
    }
    if (alone) {
        attn_written(tid, out, 2u * pairs, true);
    }
}
