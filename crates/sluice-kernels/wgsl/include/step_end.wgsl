// The end of a decode step on the GPU (advance_params.wgsl, argmax_advance.wgsl; the kernel
// declares `params` and the token ring `tokens`): the chosen token (params.token) goes to
// the next position of the ring, and pos and seq_len advance by `steps` (1 for a decode
// step, T for a prefill chunk), so the next replay of the step needs nothing from the host.
fn end_step(steps: u32) {
    let next = params.pos + steps;
    if (next < arrayLength(&tokens.d)) {
        tokens.d[next] = params.token;
    }
    params.pos = next;
    params.seq_len = next + 1u;
}
