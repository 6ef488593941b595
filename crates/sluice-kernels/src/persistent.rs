//! The persistent layer kernels ([`crate::PERSISTENT_LAYER`], [`crate::PERSISTENT_LAYER_B4`]
//! for f16 weights, `PERSISTENT_LAYER_Q_<format>` for block formats,
//! `PERSISTENT_LAYER_MIX_<a>__<b>` for layers of two block formats): one decoder layer of a
//! decode step in one dispatch whose workgroups meet at grid barriers (decision 0006).

use sluice::kernel::KernelDesc;

use crate::{AttnRopePush, WeightDtype};

/// Push constants of every persistent layer kernel ([`persistent_layer_for`]): the
/// attention fields of [`AttnRopePush`], the layer's shapes and the workgroup count.
/// Bindings: 0 params, 1 x, 2 qkv, 3 attn, 4 h (f32 activations, read-write), 5..=9 the
/// matrices qkv (stacked), o, gate, up, down (all in the kernel's format, the GPU layout of
/// the matvec family), 10 attention norm, 11 MLP norm, 12 q norm, 13 k norm,
/// 14 K cache, 15 V cache, 16 attention partials, 17 attention counters (zero), 18 the
/// [`PERSISTENT_SYNC_WORDS`] sync words (zero before the dispatch, left zero), 19 the
/// 16-byte token result (a stall sets [`PERSISTENT_ABORT_BIT`] in word 3), 20 q/k/v
/// biases and 21 RoPE multipliers (as `attention_rope`'s, read under its flags), 22 the v
/// matrix of a two-format kernel (5 then holds q and k only; others: any buffer, unread),
/// 23 the matrix read after this layer (the next layer's qkv, or the LM head), only pulled
/// into L2 by the workgroups the attention leaves idle. Dispatch
/// `[groups, 1, 1]`, never more than can be resident at once.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PersistentLayerPush {
    /// The attention op's constants (as for `attention_rope`).
    pub attn: AttnRopePush,
    /// Rows of the stacked qkv matrix.
    pub qkv_rows: u32,
    /// Hidden size (columns of qkv, gate and up; rows of o and down).
    pub hidden: u32,
    /// Query width `heads * head_dim` (columns of o).
    pub q_dim: u32,
    /// Intermediate size (rows of gate and up, columns of down).
    pub inter: u32,
    /// Row stride (vec4s of the GPU layout) of the matrices with `hidden` columns.
    pub stride_hidden: u32,
    /// Row stride of o.
    pub stride_q: u32,
    /// Row stride of down.
    pub stride_inter: u32,
    /// Workgroups of the dispatch.
    pub groups: u32,
    /// Row stride of the separate v matrix of a two-format kernel
    /// ([`persistent_layer_mix_for`]; 0 elsewhere).
    pub stride_v: u32,
}
// Every persistent kernel family shares the push layout (one Push struct in the body).
const _: () = {
    let kernels = [
        &crate::PERSISTENT_LAYER,
        &crate::PERSISTENT_LAYER_B4,
        &crate::PERSISTENT_LAYER_Q_Q4_K,
        &crate::PERSISTENT_LAYER_MIX_Q4_K__Q6_K,
    ];
    let mut i = 0;
    while i < kernels.len() {
        assert!(
            std::mem::size_of::<PersistentLayerPush>() == kernels[i].push_constant_bytes as usize
        );
        i += 1;
    }
};

/// The persistent layer kernel for a model of hidden size `hidden` with f16 weights: four
/// weight loads in flight per invocation and batch up to 2048 (Qwen3-0.6B on the H100: 870
/// tok/s vs 822 with eight), eight above (Qwen3-4B: 239 vs 213 with four).
pub fn persistent_layer(hidden: u32) -> &'static KernelDesc {
    if hidden <= 2048 {
        &crate::PERSISTENT_LAYER_B4
    } else {
        &crate::PERSISTENT_LAYER
    }
}

/// The persistent layer kernel for a layer whose five matrices are all `dtype`: f16
/// ([`persistent_layer`]) or a block format (decoded in registers against the staged float
/// input, as f16 is). None for bf16 and f32.
pub fn persistent_layer_for(dtype: WeightDtype, hidden: u32) -> Option<&'static KernelDesc> {
    match dtype {
        WeightDtype::F16 => Some(persistent_layer(hidden)),
        dt if dt.is_quantized() => crate::variant("persistent_layer_q", dt.name()),
        _ => None,
    }
}

/// The persistent layer kernel for a layer of two block formats: q and k (stacked), o, gate
/// and up in `a`, v and down in `b` (llama.cpp's Q4_K_M and Q5_K_M mixtures: Q4_K or Q5_K
/// with Q6_K). None for other pairs.
pub fn persistent_layer_mix_for(a: WeightDtype, b: WeightDtype) -> Option<&'static KernelDesc> {
    crate::variant(
        "persistent_layer_mix",
        &format!("{}__{}", a.name(), b.name()),
    )
}

/// u32 words of the persistent kernel's sync buffer (arrivals, abort flag, departures, and
/// a sink the L2 warm-up's loads feed, never read).
pub const PERSISTENT_SYNC_WORDS: usize = 4;

/// Set in the result's word 3 (`TokenResult::first_bad`) when a grid barrier of the
/// persistent kernel gave up waiting; the low bits hold the position + 1.
pub const PERSISTENT_ABORT_BIT: u32 = 0x8000_0000;

/// Grid barriers per layer dispatch (between its five ops).
pub const PERSISTENT_BARRIERS_PER_LAYER: u32 = 4;

/// Largest number of [`crate::PERSISTENT_LAYER`] workgroups that are sure to be resident
/// at once on a device with `compute_units` multiprocessors (0: unknown): one per unit —
/// a 256-invocation workgroup that launches at all fits one SM alone (registers <= 255 x
/// 256 <= the 64 K register file, shared memory 39 KiB <= 48 KiB) — and 1 where the count
/// is unknown (a single workgroup never waits for another).
pub fn persistent_residency(compute_units: u32) -> u32 {
    compute_units.max(1)
}
