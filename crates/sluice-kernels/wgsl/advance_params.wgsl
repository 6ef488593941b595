//! include: step_end
// Ends a decode step on the GPU: records the chosen token (params.token, written by the
// argmax) at the next position of the token ring and advances pos and seq_len, so the
// next replay of the step needs nothing from the host.
struct Params { token: u32, pos: u32, seq_len: u32, pad: u32 }
struct Tokens { d: array<u32> }
struct Push { steps: u32 }

@group(0) @binding(0) var<storage, read_write> params: Params;
@group(0) @binding(1) var<storage, read_write> tokens: Tokens;
var<immediate> pc: Push;

@compute @workgroup_size(1)
fn main() {
    end_step(pc.steps);
}
