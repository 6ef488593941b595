// Bindings of the batched register-built kernels of both forms (matvec_batch_cmd_q4_k_both,
// matvec_batch_cmdk_f16_both; decision 0019): plain and gated from push field `gated`
// (non-zero: gated, the up matrix from that vec4 of the one binding w, where the model keeps
// a layer's gate and up in one buffer), y as u32 words (include/batch_y_pairs.wgsl).
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> xv: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;
@group(0) @binding(3) @coherent var<storage, read_write> part: array<f32>;
@group(0) @binding(4) var<storage, read_write> tick: array<atomic<u32>>;
var<immediate> pc: Push;
fn silu() -> bool {
    return pc.gated != 0u;
}
// Gate and up in w (include/matvec_batch_staged_io.wgsl's `wraw`): no second binding, and
// `wb_raw` is never called.
const UP_IN_W: bool = true;
fn wb_raw(i: u32) -> vec4<u32> {
    return w.d[i];
}
