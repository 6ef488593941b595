//! CPU quantization speed per block format on one 4096 x 1024 matrix of deterministic
//! values (every core, as a model load does), with an FNV-1a hash of the bytes so that a
//! faster quantizer can be checked to write the same ones.
//!
//! `cargo run --release -p sluice-kernels --example quant_speed`

use sluice_kernels::quant::{quantize, QUANT_DTYPES};

fn main() {
    let (rows, cols) = (4096usize, 1024usize);
    let mut seed = 7u32;
    let data: Vec<f32> = (0..rows * cols)
        .map(|_| {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            ((seed >> 9) as f32 / 8388608.0 - 0.5) * 0.1
        })
        .collect();
    for dt in QUANT_DTYPES {
        let t = std::time::Instant::now();
        let q = quantize(dt, rows, cols, &data);
        let s = t.elapsed().as_secs_f64();
        let hash = q.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
        });
        println!(
            "{:5} {:7.3} s {:7.1} M weights/s {:8} bytes  fnv {hash:016x}",
            dt.name(),
            s,
            (rows * cols) as f64 / s / 1e6,
            q.len()
        );
    }
}
