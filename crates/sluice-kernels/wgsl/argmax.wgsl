//! include: argmax_common
// Greedy pick: result = (index, value, nonfinite, first_bad) of the largest logit among n;
// ties go to the lowest index, NaN never wins (all NaN -> index 0); `nonfinite` counts the
// NaN and ±inf logits, so the host can refuse a broken step instead of emitting token 0
// forever. A result buffer of 8 bytes gets (index, value) only (the older layout). Also
// writes params.token = index, so a replayed decode step feeds itself.
// Dispatch [groups, 1, 1], workgroup 1024 (`argmax_groups(n)` groups; any count >= 1
// works). Workgroup g scans i = g * 1024 + tid, stepping groups * 1024, and stores its best
// (value, index) and non-finite count in scratch words 1 + 3g ..; then it draws a ticket
// from scratch word 0 and the workgroup drawing the last one reduces the groups' entries
// (the order does not matter: `better` is a strict total order on non-NaN pairs), writes
// the result and puts word 0 back to 0. scratch: 1 + 3 * groups words, word 0 zero before
// the dispatch (atomics throughout, so the last workgroup never reads a stale L1 line).

struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct F32s { d: array<f32> }
// (index, bitcast value, nonfinite count, first bad); words 2-3 only when the buffer holds them.
struct Words { d: array<u32> }
struct Atomics { d: array<atomic<u32>> }
struct Push { n: u32 }

@group(0) @binding(0) var<storage, read> logits: F32s;
@group(0) @binding(1) var<storage, read_write> result: Words;
@group(0) @binding(2) var<storage, read_write> params: Params;
@group(0) @binding(3) var<storage, read_write> scratch: Atomics;
var<immediate> pc: Push;

@compute @workgroup_size(1024)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) ngroups: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(num_subgroups) nsg: u32,
) {
    let groups = ngroups.x;
    let step = groups * WG;
    let s = scan(0u, pc.n, wg.x * WG + tid, step);
    let mine = wg_best(s.v, s.i, s.bad, sg_id, sg_lane, nsg);
    let done = settle(0u, wg.x, groups, mine, tid, sg_id, sg_lane, nsg);
    let all = done.best;
    if (!done.last || tid != 0u) {
        return;
    }
    var idx = all.i;
    var v = all.v;
    if (idx == NONE) {
        idx = 0u;
        v = logits.d[0];
    }
    result.d[0] = idx;
    result.d[1] = bitcast<u32>(v);
    if (arrayLength(&result.d) >= 4u) {
        result.d[2] = all.bad;
        // Sticky: position + 1 of the first step with non-finite logits since the host
        // last cleared it, so queued replayed steps cannot hide one.
        if (all.bad > 0u && result.d[3] == 0u) {
            result.d[3] = params.pos + 1u;
        }
    }
    params.token = idx;
}
