// The grouped-query batched attention kernels' heads (batch_attention_gqa,
// batch_attention_gqa_hd128; with include/batch_attention_io.wgsl, `Lane` a vec4 of up to
// NH query heads of one key/value head).

// Workgroup column x's key/value head kvh and its query heads h0 .. h0 + nh - 1:
// (kvh, h0, nh), ceil(group / NH) columns per key/value head.
fn gqa_heads(x: u32) -> vec3<u32> {
    let group = pc.heads / pc.kv_heads;
    let quads = (group + NH - 1u) / NH;
    let kvh = x / quads;
    let h0 = kvh * group + (x % quads) * NH;
    return vec3<u32>(kvh, h0, min(NH, (kvh + 1u) * group - h0));
}

// Row r's query of heads h0 .. h0 + nh - 1 into qs, times `scale` (dim e: the heads' q[e]
// as the lanes of a vec4, lanes past nh zero).
fn stage_query(li: u32, r: u32, h0: u32, nh: u32, hd: u32) {
    let qb = r * pc.q_stride + h0 * hd;
    for (var e = li; e < hd; e += WG) {
        var qv = vec4<f32>(0.0);
        for (var i = 0u; i < nh; i++) {
            qv[i] = q.d[qb + i * hd + e] * pc.scale;
        }
        qs[e] = qv;
    }
}
