//! The architectures beyond Qwen3 and Llama 2 through GGUF files, as llama.cpp's converter
//! writes them: a `qwen2` file (q/k/v biases as `blk.N.attn_{q,k,v}.bias`) and a `llama`
//! file with Llama 3.1 RoPE scaling (`rope_freqs.weight`: one frequency divisor per pair;
//! q/k rows permuted for llama.cpp's adjacent-pair RoPE). Each is written from the weights
//! of a synthetic model with this project's GGUF writer, loaded on whatever Vulkan device
//! exists (validation on), and its logits are compared with the CPU reference of the same
//! synthetic model over teacher-forced steps.

use half::f16;
use sluice::testing::{coopmat_or_test_device, ValidationGuard};
use sluice_llm::config::{ModelConfig, RopeScaling};
use sluice_llm::decode::{Decoder, Mode};
use sluice_llm::gguf::{GgufWriter, MetaArray, MetaValue};
use sluice_llm::gguf_model::{gguf_name, ROPE_FREQS};
use sluice_llm::load::{open_model, LoadOptions};
use sluice_llm::reference::CpuModel;
use sluice_llm::safetensors::DType;
use sluice_llm::sampler::argmax;
use sluice_llm::weights::{expected_tensors, synthetic_f32, DEFAULT_SEED};

mod common;

/// GGUF type numbers of F32 and F16.
const F32: u32 = 0;
const F16: u32 = 1;

/// GPT-2's byte-level alphabet: the printable byte characters stand for themselves, the
/// others for U+0100 onwards (a vocabulary a `gpt2` tokenizer accepts).
fn byte_tokens() -> Vec<String> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut next = 256u32;
    (0u32..256)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).unwrap().to_string()
            } else {
                next += 1;
                char::from_u32(next - 1).unwrap().to_string()
            }
        })
        .collect()
}

/// The synthetic model `name` as a GGUF file of f16 matrices and f32 vectors.
fn write_gguf(name: &str, path: &std::path::Path) -> ModelConfig {
    let cfg = ModelConfig::synthetic(name).unwrap();
    let weights = synthetic_f32(&cfg, DEFAULT_SEED, DType::F16);
    let arch = cfg.arch.model_type();
    let k = |s: &str| format!("{arch}.{s}");
    let mut tokens = byte_tokens();
    tokens.push("ab".into());
    tokens.extend((tokens.len()..cfg.vocab).map(|i| format!("<extra_{i}>")));
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String(arch.into()))
        .meta(&k("block_count"), MetaValue::U32(cfg.layers as u32))
        .meta(&k("embedding_length"), MetaValue::U32(cfg.hidden as u32))
        .meta(
            &k("feed_forward_length"),
            MetaValue::U32(cfg.intermediate as u32),
        )
        .meta(&k("attention.head_count"), MetaValue::U32(cfg.heads as u32))
        .meta(
            &k("attention.head_count_kv"),
            MetaValue::U32(cfg.kv_heads as u32),
        )
        .meta(
            &k("attention.key_length"),
            MetaValue::U32(cfg.head_dim as u32),
        )
        .meta(&k("rope.freq_base"), MetaValue::F32(cfg.rope_theta))
        .meta(
            &k("attention.layer_norm_rms_epsilon"),
            MetaValue::F32(cfg.rms_eps),
        )
        .meta(
            &k("context_length"),
            MetaValue::U32(cfg.max_positions as u32),
        )
        .meta("tokenizer.ggml.model", MetaValue::String("gpt2".into()))
        .meta("tokenizer.ggml.pre", MetaValue::String("qwen2".into()))
        .meta(
            "tokenizer.ggml.tokens",
            MetaValue::Array(MetaArray::String(tokens)),
        )
        .meta(
            "tokenizer.ggml.merges",
            MetaValue::Array(MetaArray::String(vec!["a b".into()])),
        );
    for spec in expected_tensors(&cfg) {
        let v = &weights[&spec.name];
        let gname = gguf_name(&spec.name).unwrap();
        let dims: Vec<u64> = spec.shape.iter().rev().map(|&d| d as u64).collect();
        if spec.shape.len() == 1 {
            let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            w.tensor(&gname, F32, &dims, bytes);
            continue;
        }
        let (rows, cols) = (spec.shape[0], spec.shape[1]);
        let mut order: Vec<usize> = (0..rows).collect();
        let qk = gname.contains("attn_q.") || gname.contains("attn_k.");
        if arch == "llama" && qk {
            // llama.cpp's converter: HF row a * hd/2 + b of a head -> GGUF row 2b + a.
            let (hd, half) = (cfg.head_dim, cfg.head_dim / 2);
            for h in 0..rows / hd {
                for a in 0..2 {
                    for b in 0..half {
                        order[h * hd + 2 * b + a] = h * hd + a * half + b;
                    }
                }
            }
        }
        let bytes = order
            .iter()
            .flat_map(|&r| &v[r * cols..(r + 1) * cols])
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect();
        w.tensor(&gname, F16, &dims, bytes);
    }
    if let Some(m) = cfg.rope_freq_multipliers() {
        let divisors: Vec<u8> = m.iter().flat_map(|x| (1.0 / x).to_le_bytes()).collect();
        w.tensor(ROPE_FREQS, F32, &[m.len() as u64], divisors);
    }
    w.write(path).unwrap();
    cfg
}

fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

#[test]
fn qwen2_and_llama31_gguf_files_match_the_cpu_reference() {
    let d = coopmat_or_test_device();
    let _guard = ValidationGuard::new(&d);
    let dir = std::env::temp_dir().join(format!("sluice-gguf-arch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["tiny-qwen2", "tiny-llama3"] {
        let path = dir.join(format!("{name}.gguf"));
        let cfg = write_gguf(name, &path);
        let mut o = LoadOptions::default();
        o.gpu.context = 64;
        let loaded = open_model(&d, path.to_str().unwrap(), &o, |_, _| {}).unwrap();
        let got_cfg = loaded.model.config();
        assert_eq!(got_cfg.arch, cfg.arch, "{name}");
        // A Llama 3.1 file carries its scaling as divisors; the same angles either way.
        match (&cfg.rope_scaling, &got_cfg.rope_scaling) {
            (None, None) => {}
            (Some(RopeScaling::Llama3 { .. }), Some(RopeScaling::Factors(f))) => {
                assert_eq!(f.len(), cfg.head_dim / 2, "{name}")
            }
            other => panic!("{name}: rope scaling {other:?}"),
        }
        let decoder = Decoder::new(&loaded.model, Mode::Replay, Default::default()).unwrap();
        let mut cpu = CpuModel::synthetic(&cfg, DEFAULT_SEED, DType::F16).unwrap();
        let (mut token, mut worst, mut agree) = (1u32, 0f32, 0);
        for pos in 0..24 {
            let want = cpu.forward(token).unwrap();
            let next = decoder.step(token, pos).unwrap();
            worst = worst.max(rel_err(&loaded.model.logits().unwrap(), &want));
            let cpu_next = argmax(&want).unwrap();
            agree += (next == cpu_next) as usize;
            token = cpu_next;
        }
        eprintln!("{name} from GGUF: worst relative logit error {worst:.2e}, agreement {agree}/24");
        assert!(worst < 2e-3, "{name}: worst relative logit error {worst}");
        assert!(agree >= 23, "{name}: greedy agreed on {agree}/24 steps");
        // Quantized on load: the loading bar's total (and the memory check's) is the
        // Q8_0 bytes, not the file's f16 ones.
        o.dtype = Some(sluice_llm::quant_mix::parse("q8_0").unwrap());
        let mut calls = Vec::new();
        let q = open_model(&d, path.to_str().unwrap(), &o, |done, total| {
            calls.push((done, total))
        })
        .unwrap();
        assert_eq!(q.dtype, "q8_0", "{name}");
        let got = q.model.config();
        common::assert_progress_is_exact(&format!("{name} --dtype q8_0"), got, &calls);
    }
    std::fs::remove_dir_all(&dir).ok();
}
