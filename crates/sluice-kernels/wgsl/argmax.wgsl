// Greedy pick: result = (index, value, nonfinite, 0) of the largest logit among n; ties go
// to the lowest index, NaN never wins (all NaN -> index 0); `nonfinite` counts the NaN and
// ±inf logits, so the host can refuse a broken step instead of emitting token 0 forever.
// A result buffer of 8 bytes gets (index, value) only (the older layout). Also writes
// params.token = index, so a replayed decode step feeds itself. One workgroup of 1024:
// dispatch [1, 1, 1].

struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct F32s { d: array<f32> }
// (index, bitcast value, nonfinite count, 0); words 2-3 only when the buffer holds them.
struct Words { d: array<u32> }
struct Push { n: u32 }

@group(0) @binding(0) var<storage, read> logits: F32s;
@group(0) @binding(1) var<storage, read_write> result: Words;
@group(0) @binding(2) var<storage, read_write> params: Params;
var<immediate> pc: Push;

const WG: u32 = 1024u;
const NONE: u32 = 0xffffffffu;

var<workgroup> best_v: array<f32, 1024>;
var<workgroup> best_i: array<u32, 1024>;
var<workgroup> bad_n: array<u32, 1024>;

// NaN or ±inf: all exponent bits set (a bit test, immune to float-compare shortcuts).
fn nonfinite(v: f32) -> u32 {
    return select(0u, 1u, (bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u);
}

// Is (v, i) better than (bv, bi)? A NaN v never is.
fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    return v > bv || (v == bv && i < bi);
}

@compute @workgroup_size(1024)
fn main(
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(num_subgroups) nsg: u32,
) {
    var bv = bitcast<f32>(0xff800000u); // -inf
    var bi = NONE;
    var bad = 0u;
    var i = tid;
    // Four independent loads in flight per round.
    for (; i + 3u * WG < pc.n; i += 4u * WG) {
        let v0 = logits.d[i];
        let v1 = logits.d[i + WG];
        let v2 = logits.d[i + 2u * WG];
        let v3 = logits.d[i + 3u * WG];
        bad += nonfinite(v0) + nonfinite(v1) + nonfinite(v2) + nonfinite(v3);
        if (better(v0, i, bv, bi)) { bv = v0; bi = i; }
        if (better(v1, i + WG, bv, bi)) { bv = v1; bi = i + WG; }
        if (better(v2, i + 2u * WG, bv, bi)) { bv = v2; bi = i + 2u * WG; }
        if (better(v3, i + 3u * WG, bv, bi)) { bv = v3; bi = i + 3u * WG; }
    }
    for (; i < pc.n; i += WG) {
        let v = logits.d[i];
        bad += nonfinite(v);
        if (better(v, i, bv, bi)) { bv = v; bi = i; }
    }
    let m = subgroupMax(bv);
    let mi = subgroupMin(select(NONE, bi, bv == m));
    let sg_bad = subgroupAdd(bad);
    if (sg_lane == 0u) {
        best_v[sg_id] = m;
        best_i[sg_id] = mi;
        bad_n[sg_id] = sg_bad;
    }
    workgroupBarrier();
    if (tid == 0u) {
        var v = best_v[0];
        var idx = best_i[0];
        var total_bad = bad_n[0];
        for (var j = 1u; j < nsg; j++) {
            total_bad += bad_n[j];
            if (better(best_v[j], best_i[j], v, idx)) {
                v = best_v[j];
                idx = best_i[j];
            }
        }
        if (idx == NONE) {
            idx = 0u;
            v = logits.d[0];
        }
        result.d[0] = idx;
        result.d[1] = bitcast<u32>(v);
        if (arrayLength(&result.d) >= 4u) {
            result.d[2] = total_bad;
            result.d[3] = 0u;
        }
        params.token = idx;
    }
}
