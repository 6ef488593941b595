//! include: argmax_common
//! include: argmax_pick
//! include: step_end
// argmax.wgsl with the step's end folded in (advance_params.wgsl's work, done by the
// workgroup that writes the pick): the token goes to the token ring at pos + steps, and
// pos and seq_len advance, one dispatch fewer per decode step. Bindings as argmax's, then
// 4 the token ring; push (n, steps).
//
// The pick, its result words, its scratch and its dispatch: as argmax.wgsl's.

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
