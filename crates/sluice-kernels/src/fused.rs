//! Selectors of the matvec family's fused variants (`matvec_norm_*`,
//! `matvec_silu_norm_*`); their push constants are [`crate::MatvecPush`].

use sluice::kernel::KernelDesc;

use crate::{MatvecPush, WeightDtype};

const _: () = assert!(std::mem::size_of::<MatvecPush>() == crate::MATVEC_NORM_F16.push_constant_bytes as usize);
const _: () = assert!(std::mem::size_of::<MatvecPush>() == crate::MATVEC_NORM_BF16.push_constant_bytes as usize);
const _: () = assert!(std::mem::size_of::<MatvecPush>() == crate::MATVEC_NORM_F32.push_constant_bytes as usize);
const _: () = assert!(std::mem::size_of::<MatvecPush>() == crate::MATVEC_SILU_NORM_F16.push_constant_bytes as usize);
const _: () = assert!(std::mem::size_of::<MatvecPush>() == crate::MATVEC_SILU_NORM_BF16.push_constant_bytes as usize);
const _: () = assert!(std::mem::size_of::<MatvecPush>() == crate::MATVEC_SILU_NORM_F32.push_constant_bytes as usize);

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
