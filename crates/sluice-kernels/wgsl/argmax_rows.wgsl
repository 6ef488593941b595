// Greedy pick per row of a batch: for row r of n (logits at float r * stride, `vocab`
// values), result[4r..4r + 4] = (index, value bits, nonfinite count, 0) of its largest
// logit; ties go to the lowest index, NaN never wins (all NaN -> index 0), `nonfinite`
// counts NaN and ±inf logits (the host refuses such a row). Same rule as ARGMAX, with a
// fixed-order reduction, so a row's pick does not depend on the others.
// Dispatch [n, 1, 1], workgroup 256.

struct F32s { d: array<f32> }
struct Words { d: array<u32> }
struct Push { vocab: u32, stride: u32 }

@group(0) @binding(0) var<storage, read> logits: F32s;
@group(0) @binding(1) var<storage, read_write> result: Words;
var<immediate> pc: Push;

const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu;

var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;
var<workgroup> bad_n: array<u32, 256>;

fn nonfinite(v: f32) -> u32 {
    return select(0u, 1u, (bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u);
}

fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    return v > bv || (v == bv && i < bi);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let row = wg.x * pc.stride;
    var bv = bitcast<f32>(0xff800000u); // -inf
    var bi = NONE;
    var bad = 0u;
    for (var i = tid; i < pc.vocab; i += WG) {
        let v = logits.d[row + i];
        bad += nonfinite(v);
        if (better(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
    best_v[tid] = bv;
    best_i[tid] = bi;
    bad_n[tid] = bad;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            bad_n[tid] += bad_n[tid + s];
            if (better(best_v[tid + s], best_i[tid + s], best_v[tid], best_i[tid])) {
                best_v[tid] = best_v[tid + s];
                best_i[tid] = best_i[tid + s];
            }
        }
        workgroupBarrier();
    }
    if (tid == 0u) {
        var idx = best_i[0];
        var v = best_v[0];
        if (idx == NONE) {
            idx = 0u;
            v = logits.d[row];
        }
        result.d[4u * wg.x] = idx;
        result.d[4u * wg.x + 1u] = bitcast<u32>(v);
        result.d[4u * wg.x + 2u] = bad_n[0];
        result.d[4u * wg.x + 3u] = 0u;
    }
}
