// Greedy choice: result = (index, value) of the largest logit (ties: lowest index; NaN
// never wins); also params.token = index so a replayed step feeds itself.
struct F32s { d: array<f32> }
struct Result { index: u32, value: f32 }
struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct Push { n: u32 }

@group(0) @binding(0) var<storage, read> logits: F32s;
@group(0) @binding(1) var<storage, read_write> result: Result;
@group(0) @binding(2) var<storage, read_write> params: Params;
var<immediate> pc: Push;

const WG: u32 = 1024u;
var<workgroup> best_v: array<f32, 1024>;
var<workgroup> best_i: array<u32, 1024>;

fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    // NaN compares false everywhere, so it never wins.
    return v > bv || (v == bv && i < bi);
}

@compute @workgroup_size(1024)
fn main(@builtin(local_invocation_index) t: u32) {
    var bv = -3.4e38;
    var bi = 0xffffffffu;
    for (var i = t; i < pc.n; i += WG) {
        let v = logits.d[i];
        if (better(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
    best_v[t] = bv;
    best_i[t] = bi;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
        if (t < stride) {
            let ov = best_v[t + stride];
            let oi = best_i[t + stride];
            if (better(ov, oi, best_v[t], best_i[t])) {
                best_v[t] = ov;
                best_i[t] = oi;
            }
        }
        workgroupBarrier();
    }
    if (t == 0u) {
        let idx = select(best_i[0], 0u, best_i[0] == 0xffffffffu);
        result.index = idx;
        result.value = best_v[0];
        params.token = idx;
    }
}
