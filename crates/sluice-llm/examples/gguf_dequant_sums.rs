//! Prints, for every tensor of a GGUF file in a block format sluice decodes, checksums of
//! its dequantized f32 bits (wrapping sum and xor of the u32 bit patterns), for
//! `scripts/check_gguf_dequant.py`, which compares them with gguf-py's dequantization:
//! `cargo run --release -p sluice-llm --example gguf_dequant_sums -- FILE.gguf`.

use sluice_kernels::{dequantize, WeightDtype};
use sluice_llm::gguf::GgufFile;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: gguf_dequant_sums FILE.gguf")?;
    let g = GgufFile::open(&path)?;
    for t in g.tensors() {
        let Some(dt) = WeightDtype::from_ggml_type(t.ggml_type) else {
            continue;
        };
        let cols = t.dims[0] as usize;
        let rows = (t.numel() / t.dims[0].max(1)) as usize;
        let v = dequantize(dt, rows, cols, g.tensor_bytes(t));
        let (mut sum, mut xor) = (0u64, 0u32);
        for x in &v {
            sum = sum.wrapping_add(x.to_bits() as u64);
            xor ^= x.to_bits();
        }
        println!("{} {} {sum} {xor}", t.name, v.len());
    }
    Ok(())
}
