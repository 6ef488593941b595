//! include: matvec_batch_cmdq_body
//! include: matvec_batch_cmdq_q4_k
//! include: matvec_batch_staged_io
//! include: batch_y_pairs
enable f16;
enable wgpu_cooperative_matrix;
// The batched Q4_K matvec with the weights' matrix-unit operands built in registers, plain
// and gated in one kernel: y[t, r] = (Y_ADD ? y[t, r] : 0) + W[r] . xh[t], or gated
// y[t, r] = silu(Wg[r] . xh[t]) * (Wu[r] . xh[t]) with gate and up in the one binding w,
// Wu from vec4 `pc.gated` (non-zero: gated; the model keeps a layer's gate and up in one
// buffer), so no weight load picks a binding at run time. The batched decode steps' Q4_K kernel: a layer's
// q|k|v, o, gate/up and down run the same code, where a step cycling through more kernel
// code than the GPU's instruction cache holds pays at every switch (decision 0019);
// single-sequence prefill chunks keep matvec_batch_cmd_q4_k[_silu]. See
// include/matvec_batch_cmdq_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> xv: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>; // include/batch_y_pairs.wgsl
@group(0) @binding(3) @coherent var<storage, read_write> part: array<f32>;
@group(0) @binding(4) var<storage, read_write> tick: array<atomic<u32>>;
var<immediate> pc: Push;
const NTT: u32 = 2u;
const SG: u32 = 4u;
fn silu() -> bool {
    return pc.gated != 0u;
}
// Gate and up in w (include/matvec_batch_staged_io.wgsl's `wraw`); no second binding.
const UP_IN_W: bool = true;
fn wb_raw(i: u32) -> vec4<u32> {
    return w.d[i];
}
