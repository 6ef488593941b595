// What the greedy-pick kernels share (argmax.wgsl: one row over many workgroups;
// argmax_rows.wgsl: many rows, each over many workgroups): the order on (value, index)
// pairs, the non-finite test and the workgroup reduction (workgroup of WG = 1024).
const WG: u32 = 1024u;
const NONE: u32 = 0xffffffffu;

var<workgroup> best_v: array<f32, 1024>;
var<workgroup> best_i: array<u32, 1024>;
var<workgroup> bad_n: array<u32, 1024>;
var<workgroup> ticket_wg: u32;

// NaN or ±inf: all exponent bits set (a bit test, immune to float-compare shortcuts).
fn nonfinite(v: f32) -> u32 {
    return select(0u, 1u, (bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u);
}

// Is (v, i) better than (bv, bi)? A NaN v never is.
fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    return v > bv || (v == bv && i < bi);
}

struct Best { v: f32, i: u32, bad: u32 }

// The best pair and the non-finite total of the workgroup, valid in invocation 0 (every
// invocation must call it).
fn wg_best(bv: f32, bi: u32, bad: u32, sg_id: u32, sg_lane: u32, nsg: u32) -> Best {
    let m = subgroupMax(bv);
    let mi = subgroupMin(select(NONE, bi, bv == m));
    let sg_bad = subgroupAdd(bad);
    if (sg_lane == 0u) {
        best_v[sg_id] = m;
        best_i[sg_id] = mi;
        bad_n[sg_id] = sg_bad;
    }
    workgroupBarrier();
    var b = Best(best_v[0], best_i[0], bad_n[0]);
    for (var j = 1u; j < nsg; j++) {
        b.bad += bad_n[j];
        if (better(best_v[j], best_i[j], b.v, b.i)) {
            b.v = best_v[j];
            b.i = best_i[j];
        }
    }
    workgroupBarrier();
    return b;
}

// A settled pick as the kernels write it: with no pick (every logit NaN) index 0 and the
// value of logit `first`, the range's first (kernel binding `logits`).
fn written(b: Best, first: u32) -> Best {
    if (b.i == NONE) {
        return Best(logits.d[first], 0u, b.bad);
    }
    return b;
}

// This invocation's best pair and non-finite count over logits base + i for i = first,
// first + step, ... < n (kernel binding `logits`), four loads in flight per round.
fn scan(base: u32, n: u32, first: u32, step: u32) -> Best {
    var bv = bitcast<f32>(0xff800000u); // -inf
    var bi = NONE;
    var bad = 0u;
    var i = first;
    for (; i + 3u * step < n; i += 4u * step) {
        let v0 = logits.d[base + i];
        let v1 = logits.d[base + i + step];
        let v2 = logits.d[base + i + 2u * step];
        let v3 = logits.d[base + i + 3u * step];
        bad += nonfinite(v0) + nonfinite(v1) + nonfinite(v2) + nonfinite(v3);
        if (better(v0, i, bv, bi)) { bv = v0; bi = i; }
        if (better(v1, i + step, bv, bi)) { bv = v1; bi = i + step; }
        if (better(v2, i + 2u * step, bv, bi)) { bv = v2; bi = i + 2u * step; }
        if (better(v3, i + 3u * step, bv, bi)) { bv = v3; bi = i + 3u * step; }
    }
    for (; i < n; i += step) {
        let v = logits.d[base + i];
        bad += nonfinite(v);
        if (better(v, i, bv, bi)) { bv = v; bi = i; }
    }
    return Best(bv, bi, bad);
}

struct Settled { last: bool, best: Best }

// After every workgroup of one scan computed `mine` (valid in invocation 0): stores it as
// entry g of the scan's scratch at `base` (word 0 the ticket, then three words per
// workgroup), draws a ticket, and for the workgroup drawing the last of `groups` reduces
// every entry (best valid in invocation 0) and puts the ticket back to 0 (last: false for
// the others). Release before the ticket, acquire after it; atomics throughout, so the
// last workgroup never reads a stale L1 line. Every invocation calls it (it holds barriers).
fn settle(base: u32, g: u32, groups: u32, mine: Best, tid: u32, sg_id: u32, sg_lane: u32, nsg: u32) -> Settled {
    if (tid == 0u) {
        let at = base + 1u + 3u * g;
        atomicStore(&scratch.d[at], bitcast<u32>(mine.v));
        atomicStore(&scratch.d[at + 1u], mine.i);
        atomicStore(&scratch.d[at + 2u], mine.bad);
    }
    storageBarrier();
    if (tid == 0u) {
        ticket_wg = atomicAdd(&scratch.d[base], 1u);
    }
    if (workgroupUniformLoad(&ticket_wg) + 1u != groups) {
        return Settled(false, mine);
    }
    storageBarrier();
    var gv = bitcast<f32>(0xff800000u); // -inf
    var gi = NONE;
    var gbad = 0u;
    for (var e = tid; e < groups; e += WG) {
        let at = base + 1u + 3u * e;
        let v = bitcast<f32>(atomicLoad(&scratch.d[at]));
        let j = atomicLoad(&scratch.d[at + 1u]);
        gbad += atomicLoad(&scratch.d[at + 2u]);
        if (better(v, j, gv, gi)) { gv = v; gi = j; }
    }
    let all = wg_best(gv, gi, gbad, sg_id, sg_lane, nsg);
    if (tid == 0u) {
        atomicStore(&scratch.d[base], 0u);
    }
    return Settled(true, all);
}
