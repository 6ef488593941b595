//! include: argmax_common
//! include: step_end
//! include: pick_result
// The greedy pick folded into the LM head (matvec_norm_head_pick): argmax_advance.wgsl's
// result over the logits the head writes, without reading them again. Every invocation
// that writes a logit keeps the best (value, row) and the non-finite count of the rows it
// wrote (pick_row); after its last block each workgroup reduces them (wg_best), stores
// its entry in `scratch` and draws a ticket, and the workgroup drawing the last one
// reduces the entries, writes the result and params.token and ends the step (end_step by
// pc.pick_steps), as argmax_advance's last workgroup does. The same order as argmax
// (`better`: a strict total order on non-NaN pairs), so the same pick whatever the
// workgroups' order. scratch: 2 + 3 * groups words (`pick_scratch_words`): the ticket,
// three per workgroup, then the bits of logit 0 (the value written when every logit is
// NaN, as argmax writes logit 0's).
// Bindings after the matvec's (w, x, norm_w, y): 4 result, 5 params, 6 scratch, 7 the
// token ring.
struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct Words { d: array<u32> }
struct Atomics { d: array<atomic<u32>> }
struct Tokens { d: array<u32> }

@group(0) @binding(4) var<storage, read_write> result: Words;
@group(0) @binding(5) var<storage, read_write> params: Params;
@group(0) @binding(6) var<storage, read_write> scratch: Atomics;
@group(0) @binding(7) var<storage, read_write> tokens: Tokens;

// The matvec bodies' workgroup size.
const WG: u32 = 256u;

var<private> pick_v: f32;
var<private> pick_i: u32;
var<private> pick_bad: u32;
// The dispatch's workgroups.
var<private> pick_groups: u32;

fn pick_begin(groups: u32) {
    pick_v = bitcast<f32>(0xff800000u); // -inf
    pick_i = NONE;
    pick_bad = 0u;
    pick_groups = groups;
}

// Logit `row` was written as v.
fn pick_row(v: f32, row: u32) {
    pick_bad += nonfinite(v);
    if (better(v, row, pick_v, pick_i)) {
        pick_v = v;
        pick_i = row;
    }
    if (row == 0u) {
        atomicStore(&scratch.d[1u + 3u * pick_groups], bitcast<u32>(v));
    }
}

// After the workgroup's last block (every invocation calls it: it holds barriers).
fn pick_end(lin: u32, groups: u32, li: u32, sg: u32, sgi: u32) {
    let mine = wg_best(pick_v, pick_i, pick_bad, li / sg, sgi, WG / sg);
    let done = settle(0u, lin, groups, mine, li, li / sg, sgi, WG / sg);
    if (!done.last || li != 0u) {
        return;
    }
    var all = done.best;
    if (all.i == NONE) {
        all = Best(bitcast<f32>(atomicLoad(&scratch.d[1u + 3u * groups])), 0u, all.bad);
    }
    put_pick(all);
    end_step(pc.pick_steps);
}

// No second weight format (include/matvec_two_hooks.wgsl has one).
const TWO: bool = false;
const SECOND_UNIT: u32 = 1u;
fn second_dot(rb: u32, nb: u32, u: u32, t0: u32) -> f32 { return 0.0; }
