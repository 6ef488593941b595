//! A tiny chat model directory for tests and demos: the `synthetic:tiny` shapes with a
//! 260-token vocabulary (the 256 bytes plus ChatML specials) written as a Hugging Face
//! directory (`config.json`, `model.safetensors`, `tokenizer.json`, `tokenizer_config.json`
//! with a ChatML template).

use std::io::Write;
use std::path::Path;

use serde_json::{json, Map, Value};
use sluice_llm::config::ModelConfig;
use sluice_llm::safetensors::{write_safetensors_with, DType};
use sluice_llm::weights::{expected_tensors, synthetic_tensor_bytes, DEFAULT_SEED};
use sluice_llm::LlmError;

use crate::error::{Result, ServeError};

/// Special tokens of the tiny chat model, from id 256 on.
pub const SPECIALS: [&str; 4] = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|pad|>"];

/// GPT-2's byte-to-character table (printable bytes map to themselves).
fn byte_chars() -> Vec<char> {
    let mut extra = 0u32;
    (0..=255u32)
        .map(|b| {
            let printable =
                (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
            if printable {
                char::from_u32(b).unwrap_or('?')
            } else {
                extra += 1;
                char::from_u32(255 + extra).unwrap_or('?')
            }
        })
        .collect()
}

/// Writes the tiny chat model to `dir` (created if missing); returns its config.
pub fn write_tiny_chat_model(dir: &Path) -> Result<ModelConfig> {
    let mut cfg = ModelConfig::synthetic("tiny")?;
    cfg.vocab = 256 + SPECIALS.len();
    cfg.eos_token = Some(257);
    std::fs::create_dir_all(dir)
        .map_err(|e| ServeError::io(format!("create {}", dir.display()), e))?;
    let mut config = cfg.to_hf_json();
    config["torch_dtype"] = "float16".into();
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| ServeError::io(format!("write {}", p.display()), e))
    };
    write("config.json", config.to_string())?;
    let mut vocab = Map::new();
    for (id, c) in byte_chars().into_iter().enumerate() {
        vocab.insert(c.to_string(), json!(id));
    }
    let added: Vec<Value> = SPECIALS
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({"id": 256 + i, "content": s, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                            "use_regex": true});
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": byte_level,
        "post_processor": null,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null,
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "vocab": vocab, "merges": []},
    });
    write("tokenizer.json", tokenizer.to_string())?;
    let tcfg = json!({
        "bos_token": null,
        "eos_token": "<|im_end|>",
        "pad_token": "<|pad|>",
        "add_bos_token": false,
        "clean_up_tokenization_spaces": false,
        "chat_template": crate::text::CHATML,
    });
    write("tokenizer_config.json", tcfg.to_string())?;
    let specs = expected_tensors(&cfg);
    let list: Vec<(String, DType, Vec<usize>)> = specs
        .iter()
        .map(|s| (s.name.clone(), DType::F16, s.shape.clone()))
        .collect();
    let wpath = dir.join("model.safetensors");
    write_safetensors_with(&wpath, &list, |i, w: &mut dyn Write| {
        let bytes = synthetic_tensor_bytes(&cfg, DEFAULT_SEED, &specs[i], DType::F16);
        w.write_all(&bytes)
            .map_err(|e| LlmError::io(&wpath, "write", e))
    })?;
    Ok(cfg)
}
