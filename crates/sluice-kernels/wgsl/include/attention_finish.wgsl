// The combine of split attention folded into the split dispatch: after its partial is
// written, every non-empty split of output row `r` (= token * heads + head) draws a ticket
// from counters.d[r]; the workgroup drawing the last one (`used` splits hold keys) merges
// all `used` partials of that row in split order, exactly as attention_combine does
// (bit-identical), writes attn[r * head_dim ..], and puts the counter back to 0 for the
// next dispatch. Empty splits draw no ticket.
// Expects bindings `partial` (declared @coherent: the last workgroup reads what others
// wrote in this dispatch, which plain loads may serve stale from a non-coherent L1),
// `counters` (array<atomic<u32>>, zero before the dispatch) and `attn`.

var<workgroup> ticket_wg: u32;

// All invocations of the workgroup call this after their partial writes.
fn finish_head(tid: u32, r: u32, used: u32, hd: u32, splits: u32) {
    // Release: the partial writes of this workgroup reach device scope before the ticket.
    storageBarrier();
    if (tid == 0u) {
        ticket_wg = atomicAdd(&counters.d[r], 1u);
    }
    let ticket = workgroupUniformLoad(&ticket_wg);
    if (ticket + 1u != used) {
        return;
    }
    // Acquire: the other workgroups' partials (they drew their tickets after writing).
    storageBarrier();
    let stride = hd + 2u;
    let first = r * splits * stride;
    var mx = -3.0e38;
    for (var s = 0u; s < used; s++) {
        mx = max(mx, partial.d[first + s * stride]);
    }
    var l = 0.0;
    for (var s = 0u; s < used; s++) {
        let b = first + s * stride;
        l += partial.d[b + 1u] * exp(partial.d[b] - mx);
    }
    let inv = 1.0 / l;
    for (var d = tid; d < hd; d += 256u) {
        var o = 0.0;
        for (var s = 0u; s < used; s++) {
            let b = first + s * stride;
            o += partial.d[b + 2u + d] * exp(partial.d[b] - mx);
        }
        attn.d[r * hd + d] = o * inv;
    }
    attn_written(tid, r * hd, hd, false);
    if (tid == 0u) {
        atomicStore(&counters.d[r], 0u);
    }
}
