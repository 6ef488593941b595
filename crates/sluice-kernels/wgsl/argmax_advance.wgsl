//! include: argmax_common
//! include: argmax_pick
//! include: step_end
// argmax.wgsl with the step's end folded in (advance_params.wgsl's work, done by the
// workgroup that writes the pick): the token goes to the token ring at pos + steps, and
// pos and seq_len advance, one dispatch fewer per decode step. Bindings as argmax's, then
// 4 the token ring; push (n, steps).
//
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
struct Tokens { d: array<u32> }
struct Push { n: u32, steps: u32 }

@group(0) @binding(0) var<storage, read> logits: F32s;
@group(0) @binding(1) var<storage, read_write> result: Words;
@group(0) @binding(2) var<storage, read_write> params: Params;
@group(0) @binding(3) var<storage, read_write> scratch: Atomics;
@group(0) @binding(4) var<storage, read_write> tokens: Tokens;
var<immediate> pc: Push;

fn after_pick() {
    end_step(pc.steps);
}
