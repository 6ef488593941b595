//! include: argmax_common
//! include: argmax_scan
// Greedy pick per row of a batch: for row r of n (logits at float r * stride, `vocab`
// values), result[4r..4r + 4] = (index, value bits, nonfinite count, 0) of its largest
// logit; ties go to the lowest index, NaN never wins (all NaN -> index 0), `nonfinite`
// counts NaN and ±inf logits (the host refuses such a row). Same rule as ARGMAX, and like
// it each row is scanned by many workgroups: workgroup (g, r) scans the row's i = g * 1024 +
// tid, stepping groups * 1024, stores its best in the row's scratch entry g, draws a ticket
// from the row's scratch word 0, and the workgroup drawing the row's last ticket reduces
// the entries (any order: `better` is a strict total order on non-NaN pairs, so a row's
// pick does not depend on the others or on the arrival order), writes the result and puts
// word 0 back to 0. scratch: n * (1 + 3 * groups) words (row r's at r * (1 + 3 groups)),
// every ticket word zero before the dispatch.
// Dispatch [groups, n, 1] (`argmax_groups(vocab)` groups; any count >= 1 works),
// workgroup 1024.

struct F32s { d: array<f32> }
struct Words { d: array<u32> }
struct Atomics { d: array<atomic<u32>> }
struct Push { vocab: u32, stride: u32 }

@group(0) @binding(0) var<storage, read> logits: F32s;
@group(0) @binding(1) var<storage, read_write> result: Words;
@group(0) @binding(2) var<storage, read_write> scratch: Atomics;
var<immediate> pc: Push;

const WG: u32 = 1024u;

@compute @workgroup_size(1024)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) ngroups: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(num_subgroups) nsg: u32,
) {
    let r = wg.y;
    let row = r * pc.stride;
    let groups = ngroups.x;
    let base = r * (1u + 3u * groups);
    let s = scan(row, pc.vocab, wg.x * WG + tid, groups * WG);
    let mine = wg_best(s.v, s.i, s.bad, sg_id, sg_lane, nsg);
    let done = settle(base, wg.x, groups, mine, tid, sg_id, sg_lane, nsg);
    if (!done.last || tid != 0u) {
        return;
    }
    let all = written(done.best, row);
    result.d[4u * r] = all.i;
    result.d[4u * r + 1u] = bitcast<u32>(all.v);
    result.d[4u * r + 2u] = all.bad;
    result.d[4u * r + 3u] = 0u;
}
