//! Prints the summary of a GGUF file and loads every tensor the model needs through
//! `GgufTensors` (HF names, dtype and shape checks): `cargo run --release -p sluice-llm
//! --example gguf_summary -- FILE.gguf`.

use sluice_llm::gguf::GgufFile;
use sluice_llm::gguf_model::{config_from_gguf, summary, GgufTensors};
use sluice_llm::gpu::TensorData;
use sluice_llm::weights::expected_tensors;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: gguf_summary FILE.gguf")?;
    let g = GgufFile::open(&path)?;
    print!("{}", summary(&g));
    let cfg = config_from_gguf(&g)?;
    let ts = GgufTensors::new(&g, &cfg);
    let (mut n, mut bytes) = (0, 0);
    for spec in expected_tensors(&cfg) {
        match ts.tensor(&spec.name)? {
            TensorData::Raw { bytes: b, .. } => bytes += b.len(),
            TensorData::F32(v) => bytes += v.len() * 4,
        }
        n += 1;
    }
    println!("loaded {n} tensors by HF name, {bytes} bytes");
    Ok(())
}
