//! Helpers shared by the kernel test files: error measures against a CPU reference and
//! buffers filled with test data.
#![allow(dead_code)] // each test binary uses its own subset

use sluice::{Buffer, Device, ResourceClass};
use sluice_kernels::{pack_weights, WeightDtype};

/// The bit patterns of `v` (for bit-for-bit comparisons that show the values' words).
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// Normalised mean squared error of `gpu` against `reference` (0 when both are zero,
/// infinite when only the reference is).
pub fn nmse(gpu: &[f32], reference: &[f32]) -> f64 {
    assert_eq!(gpu.len(), reference.len());
    let (mut num, mut den) = (0f64, 0f64);
    for (&g, &r) in gpu.iter().zip(reference) {
        num += (g as f64 - r as f64).powi(2);
        den += (r as f64).powi(2);
    }
    if den == 0.0 {
        if num == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        num / den
    }
}

/// Fails unless the NMSE of `gpu` against `reference` is at most `max`.
#[track_caller]
pub fn assert_nmse(what: &str, gpu: &[f32], reference: &[f32], max: f64) {
    let e = nmse(gpu, reference);
    assert!(
        e <= max,
        "{what}: NMSE {e:e} > {max:e}\n gpu[..4] {:?}\n ref[..4] {:?}",
        &gpu[..gpu.len().min(4)],
        &reference[..reference.len().min(4)]
    );
}

/// A buffer holding `data` (at least 4 bytes).
pub fn f32_buffer(d: &Device, name: &str, data: &[f32], class: ResourceClass) -> Buffer {
    let b = d
        .create_buffer(name, (data.len().max(1) * 4) as u64, class)
        .unwrap();
    if !data.is_empty() {
        b.write(0, data).unwrap();
    }
    b
}

/// A buffer holding `data` (at least 4 bytes).
pub fn u32_buffer(d: &Device, name: &str, data: &[u32], class: ResourceClass) -> Buffer {
    let b = d
        .create_buffer(name, (data.len().max(1) * 4) as u64, class)
        .unwrap();
    if !data.is_empty() {
        b.write(0, data).unwrap();
    }
    b
}

/// A `[rows, cols]` weight matrix in the GPU layout of `dtype`.
pub fn weight_buffer(
    d: &Device,
    dtype: WeightDtype,
    rows: usize,
    cols: usize,
    w: &[f32],
) -> Buffer {
    let bytes = pack_weights(dtype, rows, cols, w);
    let b = d
        .create_buffer("w", bytes.len() as u64, ResourceClass::ReadOnlyWeight)
        .unwrap();
    b.write_bytes(0, &bytes).unwrap();
    b
}

/// xorshift64*: deterministic across runs and platforms.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32
    }
    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 / (1u32 << 23) as f32 - 1.0
    }
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32() * scale).collect()
    }
}
