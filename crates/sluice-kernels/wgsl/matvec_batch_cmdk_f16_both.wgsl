//! include: batch_y_pairs
//! include: half_bits
//! include: matvec_batch_cmd_f16_body
//! include: matvec_batch_cmd_f16_split
//! include: matvec_batch_split_out
//! include: matvec_batch_staged_io
enable f16;
enable wgpu_cooperative_matrix;
// matvec_batch_cmd_f16 with K split over workgroups (the batched engine's f16 matrices;
// bindings, push constants and layout as matvec_batch_cmdq, `kchunks` counting stages of
// 128 columns), plain and gated in one kernel: y[t, r] = (y_mode Y_ADD ? y[t, r] : 0) +
// W[r] . xh[t], or gated y[t, r] = silu(Wg[r] . xh[t]) * (Wu[r] . xh[t]) with gate and up
// in the one binding w, Wu from vec4 `pc.gated` (non-zero: gated; the model keeps a
// layer's gate and up in one buffer), as f16 pairs (Y_F16_PAIRS, down's input) or f32. The batched decode steps' kernel, so that a layer's matrices run
// the same code (the GPU's instruction cache; decision 0019); single-sequence prefill
// chunks keep matvec_batch_cmdk_f16[_silu]. See include/matvec_batch_cmd_f16_body.wgsl.
@group(0) @binding(0) var<storage, read> w: WVec;
@group(0) @binding(1) var<storage, read> xv: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>; // include/batch_y_pairs.wgsl
@group(0) @binding(3) @coherent var<storage, read_write> part: array<f32>;
@group(0) @binding(4) var<storage, read_write> tick: array<atomic<u32>>;
var<immediate> pc: Push;
const NTT: u32 = 2u;
fn silu() -> bool {
    return pc.gated != 0u;
}
// Gate and up in w (include/matvec_batch_staged_io.wgsl's `wraw`); no second binding.
const UP_IN_W: bool = true;
fn wb_raw(i: u32) -> vec4<u32> {
    return w.d[i];
}
