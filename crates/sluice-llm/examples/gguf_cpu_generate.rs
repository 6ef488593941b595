//! Greedy generation with the CPU reference forward from a GGUF file (weights dequantized
//! to f32 through `GgufTensors`, so the config, the HF name mapping and the q/k row order
//! are all exercised): `cargo run --release -p sluice-llm --example gguf_cpu_generate --
//! FILE.gguf "The capital of France is" [N]` (N new tokens, default 8). The prompt is split on spaces and each word
//! looked up in the GGUF vocabulary (GPT-2 style `Ġ` for a leading space).

use std::collections::HashMap;

use sluice_llm::gguf::GgufFile;
use sluice_llm::gguf_model::{config_from_gguf, GgufTensors};
use sluice_llm::gpu::TensorData;
use sluice_llm::reference::CpuModel;
use sluice_llm::weights::expected_tensors;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: gguf_cpu_generate FILE.gguf PROMPT")?;
    let prompt = args
        .next()
        .unwrap_or_else(|| "The capital of France is".into());
    let n: usize = match args.next() {
        Some(n) => n.parse()?,
        None => 8,
    };
    let g = GgufFile::open(&path)?;
    let cfg = config_from_gguf(&g)?;
    let ts = GgufTensors::new(&g, &cfg);
    let mut weights = HashMap::new();
    for spec in expected_tensors(&cfg) {
        let v = match ts.tensor(&spec.name)? {
            TensorData::Raw { dtype, bytes } => sluice_kernels::unpack_to_f32(dtype, &bytes),
            TensorData::F32(v) => v,
        };
        weights.insert(spec.name, v);
    }
    let vocab = g
        .get_str_array("tokenizer.ggml.tokens")
        .ok_or("no vocabulary")?;
    let index: HashMap<&str, u32> = vocab
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i as u32))
        .collect();
    let mut ids = Vec::new();
    for (i, w) in prompt.split(' ').enumerate() {
        let t = if i == 0 {
            w.to_string()
        } else {
            format!("Ġ{w}")
        };
        ids.push(
            *index
                .get(t.as_str())
                .ok_or(format!("{t:?} is not one token"))?,
        );
    }
    let mut model = CpuModel::new(&cfg, weights)?;
    let out = model.generate_greedy(&ids, n)?;
    let text: String = out
        .iter()
        .map(|&t| vocab[t as usize].replace('Ġ', " ").replace('Ċ', "\n"))
        .collect();
    println!("prompt ids {ids:?} -> {out:?}");
    println!("{prompt}|{text}");
    Ok(())
}
