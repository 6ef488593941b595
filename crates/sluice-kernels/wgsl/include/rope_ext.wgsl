// The optional inputs of the rope kernels, read from the bindings `qkv_bias` (q | k | v
// biases packed: q_dim + 2 kv_dim floats; the only place that layout is spelled) and
// `rope_freq` (head_dim / 2 inv_freq multipliers); callers read them only under the flags
// ROPE_BIAS / ROPE_FREQ. Included by qk_norm_rope, batch_rope, attention_rope_ext and the
// persistent layer kernels; attention_rope (models with neither) has constant stubs
// instead (see include/attention_rope_body.wgsl).
const ROPE_EXT: bool = true;

// k's bias at pair `tid` of kv head `kvh` (tid and tid + hd/2) and v's at 2 tid, 2 tid + 1.
fn rope_bias_kv(kvh: u32, tid: u32) -> vec4<f32> {
    let hd = pc.head_dim;
    let bk = (pc.heads + kvh) * hd + tid;
    let bv = (pc.heads + pc.kv_heads + kvh) * hd + 2u * tid;
    return vec4<f32>(qkv_bias.d[bk], qkv_bias.d[bk + hd / 2u], qkv_bias.d[bv],
                     qkv_bias.d[bv + 1u]);
}

// q's bias at pair `tid` of head `h`.
fn rope_bias_q(h: u32, tid: u32) -> vec2<f32> {
    let at = h * pc.head_dim + tid;
    return vec2<f32>(qkv_bias.d[at], qkv_bias.d[at + pc.head_dim / 2u]);
}

fn rope_freq_mul(tid: u32) -> f32 {
    return rope_freq.d[tid];
}
