// The grouped-query batched attention kernels' heads (batch_attention_gqa[_rope] through
// include/batch_attention_body.wgsl, batch_attention_gqa_hd128[_rope]; with
// include/batch_attention_io.wgsl): `Lane` a vec4 of up to NH query heads of one
// key/value head.
alias Lane = vec4<f32>;
const NH: u32 = 4u; // query heads per workgroup (vec4 lanes)

// Workgroup column x's key/value head kvh and its query heads h0 .. h0 + nh - 1:
// (kvh, h0, nh), ceil(group / NH) columns per key/value head.
fn column_heads(x: u32) -> vec3<u32> {
    let group = pc.heads / pc.kv_heads;
    let quads = (group + NH - 1u) / NH;
    let kvh = x / quads;
    let h0 = kvh * group + (x % quads) * NH;
    return vec3<u32>(kvh, h0, min(NH, (kvh + 1u) * group - h0));
}

// Head i's float of a Lane.
fn lane_value(v: Lane, i: u32) -> f32 {
    return v[i];
}

// v with head i's float x.
fn lane_with(v: Lane, i: u32, x: f32) -> Lane {
    var r = v;
    r[i] = x;
    return r;
}

// Head i's float of the staged query's dim d set to x (that float alone: the heads of a
// dim may be written by different invocations).
fn put_q(d: u32, i: u32, x: f32) {
    qs[d][i] = x;
}
