// The per-head RMSNorm weights of rotation pair i (at i and i + half) for q (`is_q`) or k,
// from the bindings `q_norm` and `k_norm`: qk_norm_rope and batch_rope read them under
// ROPE_NORM.
fn qk_norm_weights(is_q: bool, i: u32, half: u32) -> vec2<f32> {
    if (is_q) {
        return vec2<f32>(q_norm.d[i], q_norm.d[i + half]);
    }
    return vec2<f32>(k_norm.d[i], k_norm.d[i + half]);
}
