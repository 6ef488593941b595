// The caches of the batched attention kernels that only read them (batch_attention,
// batch_attention_gqa, batch_attention_gqa_hd128; include/batch_attention_io.wgsl): f16
// pairs in u32, [kv_heads, capacity, head_dim], and the query staged as batch_rope left it.
@group(0) @binding(3) var<storage, read> kcache: U32s;
@group(0) @binding(4) var<storage, read> vcache: U32s;
// The same caches as vec4s (bound again: 16-byte loads where a row's words start on a
// 16-byte boundary, i.e. head_dim a multiple of 8).
@group(0) @binding(6) var<storage, read> kcache4: U32x4s;
@group(0) @binding(7) var<storage, read> vcache4: U32x4s;

// Row r's query of heads h0 .. h0 + nh - 1 into qs, times `scale` (dim e: the heads' q[e]
// as the Lane's heads; heads past nh zero). The other arguments are the _rope kernels'
// (include/batch_attention_rope.wgsl). Every invocation calls it.
fn stage_heads(li: u32, sg: u32, lane: u32, sgs: u32, nsg: u32, r: u32, h0: u32, nh: u32,
               kvh: u32, appends: bool, seq: u32, pos: u32) {
    let hd = pc.head_dim;
    let qb = r * pc.q_stride + h0 * hd;
    for (var e = li; e < hd; e += WG) {
        var qv = Lane(0.0);
        for (var i = 0u; i < nh; i++) {
            qv = lane_with(qv, i, q.d[qb + i * hd + e] * pc.scale);
        }
        qs[e] = qv;
    }
}
