//! include: argmax_order
// What the greedy-pick kernels share (argmax.wgsl: one row over many workgroups;
// argmax_rows.wgsl: many rows, each over many workgroups; matvec_norm_head_pick: the LM
// head's workgroups): the workgroup reduction and the last workgroup's settling, for a
// workgroup of WG invocations (a constant of the kernel) and the kernel's `scratch` binding.

// One entry per subgroup (subgroups of at least 4 invocations; sized by invocations, the LM
// head's pick ran its Q6_K head 75.5 -> 90.9 µs on the H100).
var<workgroup> best_v: array<f32, WG / 4u>;
var<workgroup> best_i: array<u32, WG / 4u>;
var<workgroup> bad_n: array<u32, WG / 4u>;
var<workgroup> ticket_wg: u32;

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
    // Four entries per invocation and round, all loaded before any is compared (the LM
    // head's pick settles up to 6 workgroups per multiprocessor: one round trip, not four).
    var b = Best(bitcast<f32>(0xff800000u), NONE, 0u); // -inf
    for (var e = tid; e < groups; e += 4u * WG) {
        let e0 = entry(base, e, groups);
        let e1 = entry(base, e + WG, groups);
        let e2 = entry(base, e + 2u * WG, groups);
        let e3 = entry(base, e + 3u * WG, groups);
        b = best_of(best_of(b, e0), best_of(e1, best_of(e2, e3)));
    }
    let all = wg_best(b.v, b.i, b.bad, sg_id, sg_lane, nsg);
    if (tid == 0u) {
        atomicStore(&scratch.d[base], 0u);
    }
    return Settled(true, all);
}

// Entry e of the scratch at `base` (as `settle` stores them), or none (-inf, NONE, 0) past
// the last of `groups`.
fn entry(base: u32, e: u32, groups: u32) -> Best {
    var b = Best(bitcast<f32>(0xff800000u), NONE, 0u);
    if (e < groups) {
        let at = base + 1u + 3u * e;
        b = Best(bitcast<f32>(atomicLoad(&scratch.d[at])), atomicLoad(&scratch.d[at + 1u]),
                 atomicLoad(&scratch.d[at + 2u]));
    }
    return b;
}

// The better of two pairs (`better`, a strict total order on non-NaN pairs: the same pick
// in any order) with both non-finite counts.
fn best_of(a: Best, b: Best) -> Best {
    if (better(b.v, b.i, a.v, a.i)) {
        return Best(b.v, b.i, a.bad + b.bad);
    }
    return Best(a.v, a.i, a.bad + b.bad);
}
