//! GGUF files as a model source: the config from the metadata ([`config_from_gguf`]),
//! tensors by their Hugging Face names in HF row order ([`GgufTensors`]), and a summary
//! for `sluice inspect` ([`summary`]).
//!
//! llama.cpp's converter permutes the rows of q and k of `llama` models so that its RoPE
//! can rotate adjacent pairs; sluice rotates halves as HF does, so [`GgufTensors`] moves
//! those rows back (whole rows: quantized blocks stay exact).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use sluice_kernels::WeightDtype;

use crate::config::{Arch, ModelConfig, RopeScaling};
use crate::error::{LlmError, Result};
use crate::gguf::{ggml_type_name, GgufFile, GgufTensor, MetaValue};
use crate::gpu::TensorData;
use crate::weights::{expected_tensors, EMBED, FINAL_NORM, LM_HEAD};

/// Most layers accepted from a file.
pub const MAX_LAYERS: u64 = 1024;
/// Largest hidden / feed-forward width accepted.
pub const MAX_WIDTH: u64 = 1 << 18;
/// Most attention heads accepted.
pub const MAX_HEADS: u64 = 1024;
/// Largest head dimension the attention kernels handle.
pub const MAX_HEAD_DIM: u64 = 256;
/// Largest vocabulary accepted.
pub const MAX_VOCAB: u64 = 1 << 22;
/// Longest context accepted.
pub const MAX_CONTEXT: u64 = 1 << 24;

fn cfg_err(path: &Path, msg: impl Into<String>) -> LlmError {
    LlmError::Config {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

/// A required integer metadata value within `1..=max`.
fn req_bounded(g: &GgufFile, key: &str, max: u64) -> Result<usize> {
    match g.get(key) {
        None => Err(cfg_err(g.path(), format!("missing metadata {key:?}"))),
        Some(v) => bounded(g, key, v, max),
    }
}

fn bounded(g: &GgufFile, key: &str, v: &MetaValue, max: u64) -> Result<usize> {
    match v.as_u64() {
        Some(n) if (1..=max).contains(&n) => Ok(n as usize),
        _ => Err(cfg_err(
            g.path(),
            format!("metadata {key:?} is {v}, expected an integer in 1..={max}"),
        )),
    }
}

fn opt_bounded(g: &GgufFile, key: &str, max: u64) -> Result<Option<usize>> {
    g.get(key).map(|v| bounded(g, key, v, max)).transpose()
}

fn opt_f32(g: &GgufFile, key: &str) -> Result<Option<f32>> {
    match g.get(key) {
        None => Ok(None),
        Some(v) => v.as_f32().map(Some).ok_or_else(|| {
            cfg_err(
                g.path(),
                format!("metadata {key:?} is {v}, expected a float"),
            )
        }),
    }
}

/// The model config of a GGUF file of architecture `llama` (Llama 2/3, Mistral, SmolLM2),
/// `qwen2` (Qwen2, Qwen2.5: q/k/v biases) or `qwen3`. Every number is bounded before use;
/// Llama 3.1-style RoPE scaling comes from the `rope_freqs.weight` tensor (F32, one
/// frequency divisor per rotation pair), linear scaling from `rope.scaling.type` /
/// `rope.scaling.factor`; other RoPE scalings (YaRN, ...) are refused.
pub fn config_from_gguf(g: &GgufFile) -> Result<ModelConfig> {
    let path = g.path();
    let arch_name = g
        .get_str("general.architecture")
        .ok_or_else(|| cfg_err(path, "missing metadata \"general.architecture\""))?;
    let arch = match arch_name {
        "llama" => Arch::Llama,
        "qwen3" => Arch::Qwen3,
        "qwen2" => Arch::Qwen2,
        other => {
            return Err(LlmError::UnsupportedArch {
                path: path.to_path_buf(),
                found: format!(
                    "{other:?} (GGUF general.architecture; supported: llama, qwen2, qwen3)"
                ),
            })
        }
    };
    let a = arch_name;
    let k = |s: &str| format!("{a}.{s}");
    let layers = req_bounded(g, &k("block_count"), MAX_LAYERS)?;
    let hidden = req_bounded(g, &k("embedding_length"), MAX_WIDTH)?;
    let intermediate = req_bounded(g, &k("feed_forward_length"), MAX_WIDTH)?;
    let heads = req_bounded(g, &k("attention.head_count"), MAX_HEADS)?;
    let kv_heads = opt_bounded(g, &k("attention.head_count_kv"), MAX_HEADS)?.unwrap_or(heads);
    let head_dim = match opt_bounded(g, &k("attention.key_length"), MAX_HEAD_DIM)? {
        Some(d) => d,
        None => {
            if hidden % heads != 0 || hidden / heads > MAX_HEAD_DIM as usize {
                return Err(cfg_err(
                    path,
                    format!("no {:?}, and embedding_length {hidden} / head_count {heads} is not a head dimension up to {MAX_HEAD_DIM}", k("attention.key_length")),
                ));
            }
            hidden / heads
        }
    };
    if let Some(vl) = opt_bounded(g, &k("attention.value_length"), MAX_HEAD_DIM)? {
        if vl != head_dim {
            return Err(cfg_err(
                path,
                format!("attention.value_length {vl} differs from key_length {head_dim} (not supported)"),
            ));
        }
    }
    if let Some(rd) = opt_bounded(g, &k("rope.dimension_count"), MAX_HEAD_DIM)? {
        if rd != head_dim {
            return Err(cfg_err(
                path,
                format!("rope.dimension_count {rd} differs from the head dimension {head_dim} (partial rotary is not supported)"),
            ));
        }
    }
    let max_positions = req_bounded(g, &k("context_length"), MAX_CONTEXT)?;
    let rope_theta = opt_f32(g, &k("rope.freq_base"))?.unwrap_or(10000.0);
    let rms_eps = opt_f32(g, &k("attention.layer_norm_rms_epsilon"))?.ok_or_else(|| {
        cfg_err(
            path,
            format!(
                "missing metadata {:?}",
                k("attention.layer_norm_rms_epsilon")
            ),
        )
    })?;
    let mut rope_scaling = rope_freq_factors(g, head_dim)?.map(RopeScaling::Factors);
    if let Some(t) = g.get(&k("rope.scaling.type")) {
        let factor = opt_f32(g, &k("rope.scaling.factor"))?.unwrap_or(1.0);
        match t.as_str() {
            Some("none") => {}
            Some("linear") if factor == 1.0 => {}
            Some("linear") if rope_scaling.is_none() => {
                rope_scaling = Some(RopeScaling::Linear { factor });
            }
            _ => {
                return Err(cfg_err(
                    path,
                    format!("rope.scaling.type {t} (factor {factor}) is not supported (only none or linear, and not together with {ROPE_FREQS:?})"),
                ))
            }
        }
    }
    let embd = g
        .tensor("token_embd.weight")
        .ok_or_else(|| LlmError::MissingTensor {
            path: path.to_path_buf(),
            tensor: "token_embd.weight".into(),
        })?;
    let vocab = match opt_bounded(g, &k("vocab_size"), MAX_VOCAB)? {
        Some(v) => v,
        None => match embd.dims.get(1) {
            Some(&v) if (1..=MAX_VOCAB).contains(&v) => v as usize,
            _ => {
                return Err(cfg_err(
                    path,
                    format!(
                        "token_embd.weight has dims {:?}, expected [hidden, vocab <= {MAX_VOCAB}]",
                        embd.dims
                    ),
                ))
            }
        },
    };
    let token = |key: &str| -> Result<Option<u32>> {
        match g.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(t) if t < vocab as u64 => Ok(Some(t as u32)),
                _ => Err(cfg_err(
                    path,
                    format!("metadata {key:?} is {v}, expected a token id below {vocab}"),
                )),
            },
        }
    };
    let cfg = ModelConfig {
        arch,
        hidden,
        intermediate,
        layers,
        heads,
        kv_heads,
        head_dim,
        vocab,
        rope_theta,
        rope_scaling,
        rms_eps,
        tied_embeddings: g.tensor("output.weight").is_none(),
        max_positions,
        bos_token: token("tokenizer.ggml.bos_token_id")?,
        eos_token: token("tokenizer.ggml.eos_token_id")?,
    };
    cfg.check().map_err(|m| cfg_err(path, m))?;
    Ok(cfg)
}

/// Name of the tensor holding Llama 3.1-style RoPE frequency divisors.
pub const ROPE_FREQS: &str = "rope_freqs.weight";

/// The `rope_freqs.weight` tensor's divisors (F32, `head_dim / 2` of them, each finite and
/// positive), `None` when the file has none.
fn rope_freq_factors(g: &GgufFile, head_dim: usize) -> Result<Option<Vec<f32>>> {
    let Some(t) = g.tensor(ROPE_FREQS) else {
        return Ok(None);
    };
    let pairs = head_dim / 2;
    if WeightDtype::from_ggml_type(t.ggml_type) != Some(WeightDtype::F32)
        || t.numel() != pairs as u64
    {
        return Err(cfg_err(
            g.path(),
            format!(
                "tensor {ROPE_FREQS:?} is {} with dims {:?}; expected F32 with {pairs} values (head_dim / 2)",
                ggml_type_name(t.ggml_type),
                t.dims
            ),
        ));
    }
    let f: Vec<f32> = g
        .tensor_bytes(t)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    if let Some((i, x)) = f
        .iter()
        .enumerate()
        .find(|(_, x)| !(x.is_finite() && **x > 0.0))
    {
        return Err(cfg_err(
            g.path(),
            format!(
                "tensor {ROPE_FREQS:?} value {i} is {x}; RoPE frequency divisors must be positive"
            ),
        ));
    }
    Ok(Some(f))
}

/// The GGUF name of an HF tensor name, or None for names with no GGUF counterpart.
pub fn gguf_name(hf: &str) -> Option<String> {
    match hf {
        EMBED => return Some("token_embd.weight".into()),
        FINAL_NORM => return Some("output_norm.weight".into()),
        LM_HEAD => return Some("output.weight".into()),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (n, part) = rest.split_once('.')?;
    let n: usize = n.parse().ok()?;
    let g = match part {
        "self_attn.q_proj.bias" => return Some(format!("blk.{n}.attn_q.bias")),
        "self_attn.k_proj.bias" => return Some(format!("blk.{n}.attn_k.bias")),
        "self_attn.v_proj.bias" => return Some(format!("blk.{n}.attn_v.bias")),
        "input_layernorm.weight" => "attn_norm",
        "post_attention_layernorm.weight" => "ffn_norm",
        "self_attn.q_proj.weight" => "attn_q",
        "self_attn.k_proj.weight" => "attn_k",
        "self_attn.v_proj.weight" => "attn_v",
        "self_attn.o_proj.weight" => "attn_output",
        "self_attn.q_norm.weight" => "attn_q_norm",
        "self_attn.k_norm.weight" => "attn_k_norm",
        "mlp.gate_proj.weight" => "ffn_gate",
        "mlp.up_proj.weight" => "ffn_up",
        "mlp.down_proj.weight" => "ffn_down",
        _ => return None,
    };
    Some(format!("blk.{n}.{g}.weight"))
}

/// Tensors of a GGUF model by HF name, in file layout and HF row order.
#[derive(Debug)]
pub struct GgufTensors<'a> {
    file: &'a GgufFile,
    cfg: ModelConfig,
    shapes: BTreeMap<String, Vec<usize>>,
}

impl<'a> GgufTensors<'a> {
    /// Tensors of `file` for the model `cfg` (normally [`config_from_gguf`]`(file)`).
    pub fn new(file: &'a GgufFile, cfg: &ModelConfig) -> Self {
        let shapes = expected_tensors(cfg)
            .into_iter()
            .map(|s| (s.name, s.shape))
            .collect();
        GgufTensors {
            file,
            cfg: cfg.clone(),
            shapes,
        }
    }

    /// The GGUF tensor behind an HF name, its dtype checked and its dims checked against
    /// the config.
    pub fn locate(&self, hf_name: &str) -> Result<(&'a GgufTensor, WeightDtype)> {
        let path = self.file.path();
        let missing = || LlmError::MissingTensor {
            path: path.to_path_buf(),
            tensor: hf_name.to_string(),
        };
        let shape = self.shapes.get(hf_name).ok_or_else(missing)?;
        let gname = gguf_name(hf_name).ok_or_else(missing)?;
        let t = self
            .file
            .tensor(&gname)
            .ok_or_else(|| LlmError::MissingTensor {
                path: path.to_path_buf(),
                tensor: format!("{gname} ({hf_name})"),
            })?;
        let dt = WeightDtype::from_ggml_type(t.ggml_type).ok_or_else(|| {
            LlmError::UnsupportedGgmlType {
                path: path.to_path_buf(),
                tensor: gname.clone(),
                ggml_type: t.ggml_type,
                type_name: ggml_type_name(t.ggml_type),
                supported: "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K".into(),
            }
        })?;
        // GGUF dims are innermost first; HF shapes outermost first.
        let found: Vec<usize> = t.dims.iter().rev().map(|&d| d as usize).collect();
        if found != *shape {
            return Err(LlmError::ShapeMismatch {
                path: path.to_path_buf(),
                tensor: gname,
                expected: shape.clone(),
                found,
            });
        }
        Ok((t, dt))
    }

    /// The tensor `hf_name` as stored (file layout of its dtype), rows in HF order.
    pub fn tensor(&self, hf_name: &str) -> Result<TensorData<'a>> {
        let (t, dtype) = self.locate(hf_name)?;
        let bytes = self.file.tensor_bytes(t);
        let permuted = self.cfg.arch == Arch::Llama
            && (hf_name.ends_with("self_attn.q_proj.weight")
                || hf_name.ends_with("self_attn.k_proj.weight"));
        if !permuted {
            return Ok(TensorData::Raw {
                dtype,
                bytes: Cow::Borrowed(bytes),
            });
        }
        let heads = if hf_name.ends_with("q_proj.weight") {
            self.cfg.heads
        } else {
            self.cfg.kv_heads
        };
        let rows = t.dims[1] as usize;
        let row_bytes = bytes.len() / rows;
        Ok(TensorData::Raw {
            dtype,
            bytes: Cow::Owned(unpermute_rows(bytes, rows, row_bytes, heads)),
        })
    }
}

/// Undoes llama.cpp's q/k row permutation: within each head of `hd` rows, GGUF row
/// `2 b + a` is HF row `a * hd / 2 + b`.
pub fn unpermute_rows(bytes: &[u8], rows: usize, row_bytes: usize, heads: usize) -> Vec<u8> {
    let hd = rows / heads;
    let half = hd / 2;
    let mut out = vec![0u8; bytes.len()];
    for h in 0..heads {
        for a in 0..2 {
            for b in 0..half {
                let src = h * hd + 2 * b + a;
                let dst = h * hd + a * half + b;
                out[dst * row_bytes..(dst + 1) * row_bytes]
                    .copy_from_slice(&bytes[src * row_bytes..(src + 1) * row_bytes]);
            }
        }
    }
    out
}

/// A human-readable summary: architecture and sizes (when the config parses), the
/// tensor-type histogram and bytes per type.
pub fn summary(g: &GgufFile) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: GGUF v{}, {} metadata, {} tensors, {} bytes",
        g.path().display(),
        g.version(),
        g.metadata().len(),
        g.tensors().len(),
        g.len()
    );
    if let Some(n) = g.get_str("general.name") {
        let _ = writeln!(s, "name: {n}");
    }
    match config_from_gguf(g) {
        Ok(c) => {
            let _ = writeln!(
                s,
                "architecture: {} ({} layers, hidden {}, ffn {}, heads {}/{} kv, head_dim {}, vocab {}, context {}, rope base {}, eps {}, tied output: {})",
                g.get_str("general.architecture").unwrap_or("?"),
                c.layers,
                c.hidden,
                c.intermediate,
                c.heads,
                c.kv_heads,
                c.head_dim,
                c.vocab,
                c.max_positions,
                c.rope_theta,
                c.rms_eps,
                c.tied_embeddings
            );
        }
        Err(e) => {
            let _ = writeln!(
                s,
                "architecture: {} (not loadable: {e})",
                g.get_str("general.architecture").unwrap_or("?")
            );
        }
    }
    let mut hist: BTreeMap<u32, (usize, u64, u64)> = BTreeMap::new();
    for t in g.tensors() {
        let e = hist.entry(t.ggml_type).or_default();
        e.0 += 1;
        e.1 += t.numel();
        e.2 += g.tensor_bytes(t).len() as u64;
    }
    for (ty, (n, elems, bytes)) in hist {
        let _ = writeln!(
            s,
            "  {:>8}: {n:>5} tensors, {elems:>12} elements, {bytes:>12} bytes ({:.2} bits/elem){}",
            ggml_type_name(ty),
            bytes as f64 * 8.0 / elems.max(1) as f64,
            if WeightDtype::from_ggml_type(ty).is_none() {
                " [unsupported]"
            } else {
                ""
            }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{GgufWriter, MetaArray};
    use sluice_kernels::{quantize, WeightDtype as W};

    /// A tiny llama/qwen3 GGUF written as llama.cpp's converter would (q/k rows
    /// permuted for llama), with the HF tensors it came from.
    type HfTensors = BTreeMap<String, (W, Vec<u8>)>;

    fn tiny(arch: &str, q_dt: W) -> (GgufWriter, ModelConfig, HfTensors) {
        let cfg = ModelConfig {
            arch: match arch {
                "llama" => Arch::Llama,
                "qwen2" => Arch::Qwen2,
                _ => Arch::Qwen3,
            },
            hidden: 64,
            intermediate: 96,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            vocab: 40,
            rope_theta: 1e5,
            rope_scaling: None,
            rms_eps: 1e-5,
            tied_embeddings: true,
            max_positions: 256,
            bos_token: Some(1),
            eos_token: Some(2),
        };
        let mut w = GgufWriter::new();
        let m = |k: &str| format!("{arch}.{k}");
        w.meta("general.architecture", MetaValue::String(arch.into()))
            .meta(&m("block_count"), MetaValue::U32(2))
            .meta(&m("embedding_length"), MetaValue::U32(64))
            .meta(&m("feed_forward_length"), MetaValue::U32(96))
            .meta(&m("attention.head_count"), MetaValue::U32(4))
            .meta(&m("attention.head_count_kv"), MetaValue::U32(2))
            .meta(&m("attention.key_length"), MetaValue::U32(16))
            .meta(&m("rope.freq_base"), MetaValue::F32(1e5))
            .meta(&m("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-5))
            .meta(&m("context_length"), MetaValue::U32(256))
            .meta("tokenizer.ggml.bos_token_id", MetaValue::U32(1))
            .meta("tokenizer.ggml.eos_token_id", MetaValue::U32(2))
            .meta(
                "tokenizer.ggml.tokens",
                MetaValue::Array(MetaArray::String(vec!["a".into(); 40])),
            );
        let mut hf = BTreeMap::new();
        for (i, spec) in expected_tensors(&cfg).into_iter().enumerate() {
            let n = spec.numel();
            let vals: Vec<f32> = (0..n)
                .map(|j| (((j * 7 + i * 13) % 23) as f32 - 11.0) / 10.0)
                .collect();
            let dt = if spec.shape.len() == 1 {
                W::F32
            } else if spec.name == EMBED {
                W::Q8_0
            } else {
                q_dt
            };
            let (rows, cols) = (spec.shape[0], *spec.shape.last().unwrap());
            let bytes = quantize(
                dt,
                if spec.shape.len() == 1 { 1 } else { rows },
                cols,
                &vals,
            );
            let gname = gguf_name(&spec.name).unwrap();
            let mut stored = bytes.clone();
            if arch == "llama" && (gname.contains("attn_q.") || gname.contains("attn_k.")) {
                // The converter's permutation: HF row a * hd/2 + b -> GGUF row 2b + a.
                let heads = if gname.contains("attn_q.") { 4 } else { 2 };
                let rb = bytes.len() / rows;
                let (hd, half) = (rows / heads, rows / heads / 2);
                for h in 0..heads {
                    for a in 0..2 {
                        for b in 0..half {
                            let (src, dst) = (h * hd + a * half + b, h * hd + 2 * b + a);
                            stored[dst * rb..(dst + 1) * rb]
                                .copy_from_slice(&bytes[src * rb..(src + 1) * rb]);
                        }
                    }
                }
            }
            let dims: Vec<u64> = spec.shape.iter().rev().map(|&d| d as u64).collect();
            w.tensor(&gname, dt.ggml_type(), &dims, stored);
            hf.insert(spec.name.clone(), (dt, bytes));
        }
        (w, cfg, hf)
    }

    #[test]
    fn config_and_tensors_round_trip_in_hf_order() {
        for (arch, dt) in [
            ("llama", W::Q4_1),
            ("qwen3", W::Q8_0),
            ("llama", W::F16),
            ("qwen2", W::Q4_0),
        ] {
            let (w, cfg, hf) = tiny(arch, dt);
            let g = GgufFile::from_bytes("tiny.gguf", w.to_bytes().unwrap()).unwrap();
            let got = config_from_gguf(&g).unwrap();
            assert_eq!(got, cfg, "{arch}");
            let ts = GgufTensors::new(&g, &got);
            for (name, (dt, bytes)) in &hf {
                match ts.tensor(name).unwrap() {
                    TensorData::Raw { dtype, bytes: b } => {
                        assert_eq!(dtype, *dt, "{name}");
                        assert_eq!(&b[..], &bytes[..], "{arch} {name}: bytes in HF row order");
                    }
                    TensorData::F32(_) => panic!("{name}: expected raw bytes"),
                }
            }
            assert_eq!(hf.len(), expected_tensors(&cfg).len());
            let s = summary(&g);
            assert!(s.contains("2 layers") && s.contains("Q8_0"), "{s}");
        }
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let bytes = |w: &GgufWriter| GgufFile::from_bytes("t.gguf", w.to_bytes().unwrap());
        let err = |w: &GgufWriter| {
            config_from_gguf(&bytes(w).unwrap())
                .unwrap_err()
                .to_string()
        };
        let (mut w, _, _) = tiny("llama", W::Q4_0);
        w.meta("llama.rope.scaling.type", MetaValue::String("yarn".into()));
        assert!(
            err(&w).contains("rope.scaling.type \"yarn\""),
            "{}",
            err(&w)
        );
        let linear = |factor: f32| {
            let (mut w, _, _) = tiny("llama", W::Q4_0);
            w.meta(
                "llama.rope.scaling.type",
                MetaValue::String("linear".into()),
            )
            .meta("llama.rope.scaling.factor", MetaValue::F32(factor));
            w
        };
        let got = config_from_gguf(&bytes(&linear(1.0)).unwrap()).unwrap();
        assert_eq!(got.rope_scaling, None);
        let got = config_from_gguf(&bytes(&linear(4.0)).unwrap()).unwrap();
        assert_eq!(got.rope_scaling, Some(RopeScaling::Linear { factor: 4.0 }));
        assert_eq!(got.rope_freq_multipliers().unwrap(), vec![0.25; 8]);
        assert!(
            err(&linear(-2.0)).contains("factor -2"),
            "{}",
            err(&linear(-2.0))
        );
        // RoPE frequency divisors: F32, head_dim / 2 of them, positive.
        let freqs = |w: &mut GgufWriter, ty: W, v: &[f32]| {
            let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
            w.tensor(ROPE_FREQS, ty.ggml_type(), &[v.len() as u64], bytes);
        };
        let (mut w, cfg, _) = tiny("llama", W::Q4_0);
        let good: Vec<f32> = (0..8).map(|i| 1.0 + i as f32).collect();
        freqs(&mut w, W::F32, &good);
        let got = config_from_gguf(&bytes(&w).unwrap()).unwrap();
        assert_eq!(got.rope_scaling, Some(RopeScaling::Factors(good.clone())));
        let mul = got.rope_freq_multipliers().unwrap();
        assert_eq!(mul[3], 0.25);
        assert_eq!(got.rope_scaling.as_ref().map(|_| ()), Some(()));
        assert_eq!(
            ModelConfig {
                rope_scaling: None,
                ..got
            },
            cfg
        );
        let (mut w, _, _) = tiny("llama", W::Q4_0);
        freqs(&mut w, W::F32, &good[..6]);
        assert!(
            err(&w).contains("expected F32 with 8 values"),
            "{}",
            err(&w)
        );
        let (mut w, _, _) = tiny("llama", W::Q4_0);
        let mut bad = good.clone();
        bad[5] = -1.0;
        freqs(&mut w, W::F32, &bad);
        assert!(err(&w).contains("value 5 is -1"), "{}", err(&w));
        let mut w = GgufWriter::new();
        w.meta("general.architecture", MetaValue::String("gpt2".into()));
        assert!(err(&w).contains("gpt2"), "{}", err(&w));
        let mut w2 = GgufWriter::new();
        w2.meta("general.architecture", MetaValue::String("qwen3".into()))
            .meta("qwen3.block_count", MetaValue::U64(1 << 40));
        assert!(err(&w2).contains("qwen3.block_count"), "{}", err(&w2));
        // An unsupported GGML type names the tensor and the type.
        let (w, cfg, _) = tiny("llama", W::Q4_0);
        let mut b = w.to_bytes().unwrap();
        let g = GgufFile::from_bytes("t", b.clone()).unwrap();
        let t = g.tensor("blk.1.ffn_up.weight").unwrap().clone();
        // Patch its type to IQ4_NL (20), which has Q4_0's block size and bytes.
        let name_at = b
            .windows(t.name.len())
            .position(|w| w == t.name.as_bytes())
            .unwrap();
        let ty_at = name_at + t.name.len() + 4 + 8 * t.dims.len();
        assert_eq!(b[ty_at..ty_at + 4], W::Q4_0.ggml_type().to_le_bytes());
        b[ty_at..ty_at + 4].copy_from_slice(&20u32.to_le_bytes());
        let g = GgufFile::from_bytes("t", b).unwrap();
        let e = GgufTensors::new(&g, &cfg)
            .tensor("model.layers.1.mlp.up_proj.weight")
            .err()
            .expect("IQ4_NL refused")
            .to_string();
        assert!(
            e.contains("blk.1.ffn_up.weight") && e.contains("IQ4_NL"),
            "{e}"
        );
        // Shapes are checked against the config.
        let mut small = cfg.clone();
        small.intermediate = 64;
        let (w, _, _) = tiny("llama", W::Q4_0);
        let g = bytes(&w).unwrap();
        let e = GgufTensors::new(&g, &small)
            .tensor("model.layers.0.mlp.gate_proj.weight")
            .err()
            .expect("shape refused")
            .to_string();
        assert!(
            e.contains("expected [64, 64]") && e.contains("[96, 64]"),
            "{e}"
        );
    }
}
