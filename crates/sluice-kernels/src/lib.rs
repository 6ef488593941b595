//! WGSL compute kernels, compiled to SPIR-V at build time by naga.
//!
//! Each `wgsl/NAME.wgsl` becomes a `NAME` constant of type [`KernelDesc`] whose bindings,
//! push-constant size and workgroup size are read from the shader module itself by
//! `build.rs`. Push-constant structs live here too, checked against those sizes at compile
//! time.

use sluice::kernel::{BindingAccess, KernelDesc, Pod};

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));

/// Push constants of [`AFFINE_U32`]: `dst[i] = src[i] * mul + add` for `i < n`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AffinePush {
    /// Multiplier.
    pub mul: u32,
    /// Addend.
    pub add: u32,
    /// Element count.
    pub n: u32,
}
// SAFETY: repr(C), three u32 fields, no padding, any bit pattern valid.
unsafe impl Pod for AffinePush {}
const _: () = assert!(std::mem::size_of::<AffinePush>() == AFFINE_U32.push_constant_bytes as usize);

/// Push constants of [`SPIN_U32`]: `iters` rounds of an integer hash over `n` words.
/// lavapipe ends any shader loop after 65535 iterations: keep `iters` below that.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SpinPush {
    /// Hash rounds per element.
    pub iters: u32,
    /// Element count.
    pub n: u32,
}
// SAFETY: repr(C), two u32 fields, no padding.
unsafe impl Pod for SpinPush {}
const _: () = assert!(std::mem::size_of::<SpinPush>() == SPIN_U32.push_constant_bytes as usize);

/// CPU reference of [`SPIN_U32`] for one element.
pub fn spin_u32_cpu(mut x: u32, iters: u32) -> u32 {
    for k in 0..iters {
        x = (x ^ (x >> 15)).wrapping_mul(2246822519).wrapping_add(k);
    }
    x
}

/// CPU reference of [`AFFINE_U32`] for one element.
pub fn affine_u32_cpu(x: u32, p: &AffinePush) -> u32 {
    x.wrapping_mul(p.mul).wrapping_add(p.add)
}

/// Workgroups needed to cover `n` items with groups of `size`.
pub fn groups_for(n: u32, size: u32) -> u32 {
    n.div_ceil(size).max(1)
}
