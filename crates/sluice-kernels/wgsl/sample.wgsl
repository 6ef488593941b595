// Sampling on the GPU: temperature, top-k, top-p (nucleus) and a seeded draw, in one
// workgroup; writes result = (index, logit, nonfinite count, 0) and params.token = index
// like argmax (an 8-byte result buffer gets (index, logit) only). A temperature below
// 1e-6 acts as greedy (1 / temperature would overflow): the lowest-index largest logit.
//   candidates: logits >= the k-th largest (ties at the threshold included; top_k 0 = all),
//   then the smallest set of the highest ones whose softmax(l / temperature) mass reaches
//   top_p (found as the largest threshold whose mass >= top_p);
//   draw: u = hash(seed, params.pos) in [0, 1), the token where the running sum of the
//   candidates' weights, in index order, passes u * total.
// Thresholds are found by bisection over the order-preserving u32 image of the logits.
struct F32s { d: array<f32> }
struct Words { d: array<u32> }
struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct Push { n: u32, top_k: u32, temperature: f32, top_p: f32, seed_lo: u32, seed_hi: u32, p0: u32, p1: u32 }

@group(0) @binding(0) var<storage, read> logits: F32s;
@group(0) @binding(1) var<storage, read_write> result: Words;
@group(0) @binding(2) var<storage, read_write> params: Params;
var<immediate> pc: Push;

const WG: u32 = 1024u;
var<workgroup> red_f: array<f32, 1024>;
var<workgroup> red_u: array<u32, 1024>;

// Order-preserving map f32 -> u32 (NaN maps above +inf and is never a candidate).
fn key(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

fn sum_f(v: f32, t: u32) -> f32 {
    workgroupBarrier();
    red_f[t] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s /= 2u) {
        if (t < s) {
            red_f[t] += red_f[t + s];
        }
        workgroupBarrier();
    }
    return red_f[0];
}

fn sum_u(v: u32, t: u32) -> u32 {
    workgroupBarrier();
    red_u[t] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s /= 2u) {
        if (t < s) {
            red_u[t] += red_u[t + s];
        }
        workgroupBarrier();
    }
    return red_u[0];
}

fn max_f(v: f32, t: u32) -> f32 {
    workgroupBarrier();
    red_f[t] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s /= 2u) {
        if (t < s) {
            red_f[t] = max(red_f[t], red_f[t + s]);
        }
        workgroupBarrier();
    }
    return red_f[0];
}

// 32-bit mix (lowbias32), shared with the CPU reference `sample_cpu`.
fn mix(x0: u32) -> u32 {
    var x = x0;
    x ^= x >> 16u;
    x *= 0x7feb352du;
    x ^= x >> 15u;
    x *= 0x846ca68bu;
    x ^= x >> 16u;
    return x;
}

// Finite: not all exponent bits set (a bit test, immune to float-compare shortcuts).
fn valid(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

var<private> greedy: bool;
var<private> inv_t: f32;

// Unnormalised probability of logit v given the maximum m (greedy: 1 for the maxima).
fn weight(v: f32, m: f32) -> f32 {
    if (greedy) {
        return select(0.0, 1.0, v == m);
    }
    return exp((v - m) * inv_t);
}

@compute @workgroup_size(1024)
fn main(@builtin(local_invocation_index) t: u32) {
    let n = pc.n;
    greedy = !(pc.temperature >= 1e-6);
    inv_t = select(1.0 / pc.temperature, 1.0, greedy);
    // Max of the valid logits; count of the others.
    var m = -3.4e38;
    var bad = 0u;
    for (var i = t; i < n; i += WG) {
        let v = logits.d[i];
        if (valid(v)) {
            m = max(m, v);
        } else {
            bad += 1u;
        }
    }
    m = max_f(m, t);
    bad = sum_u(bad, t);
    // top-k threshold: the largest key with count(key >= it) >= k.
    var lo = 0u;
    if (pc.top_k > 0u && pc.top_k < n) {
        var hi = 0xffffffffu;
        for (var it = 0u; it < 32u; it++) {
            let mid = lo + (hi - lo) / 2u + 1u;
            var c = 0u;
            for (var i = t; i < n; i += WG) {
                let v = logits.d[i];
                c += select(0u, 1u, valid(v) && key(v) >= mid);
            }
            let total = sum_u(c, t);
            if (total >= pc.top_k) {
                lo = mid;
            } else {
                hi = mid - 1u;
            }
            if (lo >= hi) {
                break;
            }
        }
    }
    // Mass of the top-k candidates, then the top-p threshold above lo.
    var z = 0.0;
    for (var i = t; i < n; i += WG) {
        let v = logits.d[i];
        if (valid(v) && key(v) >= lo) {
            z += weight(v, m);
        }
    }
    z = sum_f(z, t);
    var thr = lo;
    if (pc.top_p < 1.0) {
        var hi = 0xffffffffu;
        let want = pc.top_p * z;
        for (var it = 0u; it < 32u; it++) {
            let mid = thr + (hi - thr) / 2u + 1u;
            var s = 0.0;
            for (var i = t; i < n; i += WG) {
                let v = logits.d[i];
                if (valid(v) && key(v) >= mid) {
                    s += weight(v, m);
                }
            }
            let mass = sum_f(s, t);
            if (mass >= want) {
                thr = mid;
            } else {
                hi = mid - 1u;
            }
            if (thr >= hi) {
                break;
            }
        }
    }
    // Draw: contiguous blocks per invocation, prefix sums in shared memory.
    let block = (n + WG - 1u) / WG;
    let b0 = min(t * block, n);
    let b1 = min(b0 + block, n);
    var mine = 0.0;
    for (var i = b0; i < b1; i++) {
        let v = logits.d[i];
        if (valid(v) && key(v) >= thr) {
            mine += weight(v, m);
        }
    }
    workgroupBarrier();
    red_f[t] = mine;
    workgroupBarrier();
    // Inclusive scan (Hillis-Steele).
    for (var s = 1u; s < WG; s *= 2u) {
        var add = 0.0;
        if (t >= s) {
            add = red_f[t - s];
        }
        workgroupBarrier();
        red_f[t] += add;
        workgroupBarrier();
    }
    let total = red_f[WG - 1u];
    // Greedy: u = 0 takes the first (lowest-index) maximum.
    let u = select(f32(mix(mix(pc.seed_lo ^ mix(pc.seed_hi)) ^ params.pos) >> 8u) / 16777216.0, 0.0, greedy);
    let goal = u * total;
    let before = red_f[t] - mine;
    // Index of the chosen token, or n when no invocation found one (rounding at the end).
    red_u[t] = n;
    workgroupBarrier();
    if (mine > 0.0 && goal >= before && goal < before + mine) {
        var acc = before;
        var pick = n;
        var last = n;
        for (var i = b0; i < b1; i++) {
            let v = logits.d[i];
            if (valid(v) && key(v) >= thr) {
                acc += weight(v, m);
                last = i;
                if (goal < acc) {
                    pick = i;
                    break;
                }
            }
        }
        red_u[t] = select(pick, last, pick == n);
    }
    workgroupBarrier();
    if (t == 0u) {
        var pick = n;
        var last = n;
        for (var j = 0u; j < WG; j++) {
            if (red_u[j] < n) {
                pick = min(pick, red_u[j]);
            }
        }
        if (pick == n) {
            // Rounding left the goal past the last candidate: take the largest index.
            for (var i = n; i > 0u; i--) {
                let v = logits.d[i - 1u];
                if (valid(v) && key(v) >= thr) {
                    last = i - 1u;
                    break;
                }
            }
            pick = select(last, 0u, last == n);
        }
        result.d[0] = pick;
        result.d[1] = bitcast<u32>(logits.d[pick]);
        if (arrayLength(&result.d) >= 4u) {
            result.d[2] = bad;
            result.d[3] = 0u;
        }
        params.token = pick;
    }
}
