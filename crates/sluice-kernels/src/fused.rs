//! Selectors of the matvec family's fused variants (`matvec_norm_*`,
//! `matvec_silu_norm_*`); their push constants are [`crate::MatvecPush`].

use sluice::kernel::KernelDesc;

use crate::{MatvecPush, WeightDtype};

const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_NORM_F16.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_NORM_BF16.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_NORM_F32.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_SILU_NORM_F16.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_SILU_NORM_BF16.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_SILU_NORM_F32.push_constant_bytes as usize
);

/// `matvec_norm` (RMSNorm feeding a matvec) for a weight dtype.
pub fn matvec_norm(dtype: WeightDtype) -> &'static KernelDesc {
    match dtype {
        WeightDtype::F16 => &crate::MATVEC_NORM_F16,
        WeightDtype::Bf16 => &crate::MATVEC_NORM_BF16,
        WeightDtype::F32 => &crate::MATVEC_NORM_F32,
    }
}

/// `matvec_silu_norm` (RMSNorm + gate/up + SiLU·mul) for a weight dtype.
pub fn matvec_silu_norm(dtype: WeightDtype) -> &'static KernelDesc {
    match dtype {
        WeightDtype::F16 => &crate::MATVEC_SILU_NORM_F16,
        WeightDtype::Bf16 => &crate::MATVEC_SILU_NORM_BF16,
        WeightDtype::F32 => &crate::MATVEC_SILU_NORM_F32,
    }
}

/// Push constants of [`crate::ATTENTION_ROPE`]: attention with the q/k RMSNorm, rotary
/// embedding and KV append folded in. Bindings: 0 params (read), 1 q|k|v (read), 2 q_norm
/// f32 `[hd]`, 3 k_norm f32 `[hd]` (read), 4 kcache, 5 vcache (read-write), 6 partial
/// (read-write, as `attention_split`). Dispatch `[splits, heads, 1]`, then
/// `attention_combine` with the same first seven fields as an [`crate::AttnPush`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AttnRopePush {
    /// Query heads.
    pub heads: u32,
    /// Key/value heads (divides `heads`).
    pub kv_heads: u32,
    /// Head dimension (even, <= 256).
    pub head_dim: u32,
    /// KV-cache capacity in positions.
    pub capacity: u32,
    /// Positions per split (<= 256).
    pub chunk: u32,
    /// Splits.
    pub splits: u32,
    /// Score scale, usually `1 / sqrt(head_dim)`.
    pub scale: f32,
    /// Non-zero: per-head RMSNorm of q and k (Qwen3).
    pub use_norm: u32,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// RoPE base.
    pub theta: f32,
    /// First float of k in the q|k|v buffer.
    pub k_offset: u32,
    /// First float of v in the q|k|v buffer.
    pub v_offset: u32,
}
// SAFETY: repr(C), twelve 4-byte fields, no padding.
unsafe impl sluice::kernel::Pod for AttnRopePush {}
const _: () = assert!(
    std::mem::size_of::<AttnRopePush>() == crate::ATTENTION_ROPE.push_constant_bytes as usize
);

/// Push constants of [`crate::ADVANCE_PARAMS`]: advance the position by `steps` (1 after a
/// decode step, T after a prefill chunk of T tokens) and record the chosen token there.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AdvancePush {
    /// Positions to advance.
    pub steps: u32,
}
// SAFETY: repr(C), one u32 field.
unsafe impl sluice::kernel::Pod for AdvancePush {}
const _: () = assert!(
    std::mem::size_of::<AdvancePush>() == crate::ADVANCE_PARAMS.push_constant_bytes as usize
);

/// The prefill (many tokens per dispatch, token index = workgroup z) variants of the
/// matvec family: `matvec_tokens`, `matvec_norm_tokens`, `matvec_silu_norm_tokens`.
pub fn matvec_tokens(dtype: WeightDtype) -> [&'static KernelDesc; 3] {
    match dtype {
        WeightDtype::F16 => [
            &crate::MATVEC_TOKENS_F16,
            &crate::MATVEC_NORM_TOKENS_F16,
            &crate::MATVEC_SILU_NORM_TOKENS_F16,
        ],
        WeightDtype::Bf16 => [
            &crate::MATVEC_TOKENS_BF16,
            &crate::MATVEC_NORM_TOKENS_BF16,
            &crate::MATVEC_SILU_NORM_TOKENS_BF16,
        ],
        WeightDtype::F32 => [
            &crate::MATVEC_TOKENS_F32,
            &crate::MATVEC_NORM_TOKENS_F32,
            &crate::MATVEC_SILU_NORM_TOKENS_F32,
        ],
    }
}
const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_TOKENS_F16.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_NORM_TOKENS_F16.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<MatvecPush>()
        == crate::MATVEC_SILU_NORM_TOKENS_F16.push_constant_bytes as usize
);
