// The one-head batched attention kernels' heads (batch_attention, batch_attention_rope;
// include/batch_attention_body.wgsl with include/batch_attention_io.wgsl): `Lane` one
// query head's float, one query head per workgroup column.
alias Lane = f32;
const NH: u32 = 1u; // query heads per workgroup

// Workgroup column x's key/value head kvh and its query head h: (kvh, h, 1).
fn column_heads(x: u32) -> vec3<u32> {
    return vec3<u32>(x / (pc.heads / pc.kv_heads), x, 1u);
}

// Head i's float of a Lane (one head: the float itself).
fn lane_value(v: Lane, i: u32) -> f32 {
    return v;
}

// v with head i's float x (one head: x).
fn lane_with(v: Lane, i: u32, x: f32) -> Lane {
    return x;
}

// Head i's float of the staged query's dim d set to x (one head: the float itself).
fn put_q(d: u32, i: u32, x: f32) {
    qs[d] = x;
}
