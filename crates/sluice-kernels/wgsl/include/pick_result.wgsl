// How the greedy picks that feed a decode step write their pick (argmax_pick.wgsl,
// matvec_pick.wgsl; the kernel declares `result` and `params`): (index, value bits) and,
// where the result buffer holds them, the non-finite count and the sticky marker, then
// params.token.
fn put_pick(all: Best) {
    result.d[0] = all.i;
    result.d[1] = bitcast<u32>(all.v);
    if (arrayLength(&result.d) >= 4u) {
        result.d[2] = all.bad;
        // Sticky: position + 1 of the first step with non-finite logits since the host
        // last cleared it, so queued replayed steps cannot hide one.
        if (all.bad > 0u && result.d[3] == 0u) {
            result.d[3] = params.pos + 1u;
        }
    }
    params.token = all.i;
}
