//! Push constants of the fused RMSNorm + matvec kernels (`matvec_norm_*`,
//! `matvec_silu_norm_*`), and their selectors.

use sluice::kernel::{KernelDesc, Pod};

use crate::WeightDtype;

/// Push constants of `matvec_norm_*` and `matvec_silu_norm_*`: a matvec whose input is
/// RMSNorm(x) * norm_w, computed inside the kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MatvecNormPush {
    /// Output rows.
    pub rows: u32,
    /// Input length (<= [`NORM_MAX_COLS`]).
    pub cols: u32,
    /// Row stride in 8-element chunks.
    pub stride8: u32,
    /// Add to y instead of overwriting it (matvec_norm only).
    pub accumulate: u32,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// Padding.
    pub _pad: [u32; 3],
}
// SAFETY: repr(C), eight 4-byte fields, no padding.
unsafe impl Pod for MatvecNormPush {}
const _: () = assert!(std::mem::size_of::<MatvecNormPush>() == crate::MATVEC_NORM_F16.push_constant_bytes as usize);
const _: () = assert!(std::mem::size_of::<MatvecNormPush>() == crate::MATVEC_SILU_NORM_F16.push_constant_bytes as usize);

/// Longest input the fused norm kernels take (their shared-memory copy of x).
pub const NORM_MAX_COLS: usize = 6144;

/// `matvec_norm` for a weight dtype.
pub fn matvec_norm(dtype: WeightDtype) -> &'static KernelDesc {
    match dtype {
        WeightDtype::F16 => &crate::MATVEC_NORM_F16,
        WeightDtype::Bf16 => &crate::MATVEC_NORM_BF16,
        WeightDtype::F32 => &crate::MATVEC_NORM_F32,
    }
}

/// `matvec_silu_norm` for a weight dtype.
pub fn matvec_silu_norm(dtype: WeightDtype) -> &'static KernelDesc {
    match dtype {
        WeightDtype::F16 => &crate::MATVEC_SILU_NORM_F16,
        WeightDtype::Bf16 => &crate::MATVEC_SILU_NORM_BF16,
        WeightDtype::F32 => &crate::MATVEC_SILU_NORM_F32,
    }
}
