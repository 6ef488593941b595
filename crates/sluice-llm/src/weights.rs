//! Weight tensors of Qwen3/Qwen2/Llama in Hugging Face naming: the expected list for a config,
//! the check of a model directory against it, conversion to f32, and deterministic
//! synthetic weights generated per tensor (streaming, so 4B-parameter models are cheap).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use crate::config::ModelConfig;
use crate::error::{LlmError, Result};
use crate::layer::ModelTensor;
use crate::safetensors::{
    write_safetensors_with, DType, ModelFiles, TensorView, CONFIG_FILE, WEIGHTS_FILE,
};

/// Token embedding, `[vocab, hidden]`.
pub const EMBED: &str = ModelTensor::Embed.hf_name();
/// Final RMSNorm weight, `[hidden]`.
pub const FINAL_NORM: &str = ModelTensor::FinalNorm.hf_name();
/// LM head, `[vocab, hidden]`; absent when embeddings are tied.
pub const LM_HEAD: &str = ModelTensor::LmHead.hf_name();

/// The full name of a per-layer tensor, e.g. `layer_tensor(3, "self_attn.q_proj.weight")`.
pub fn layer_tensor(layer: usize, part: &str) -> String {
    format!("model.layers.{layer}.{part}")
}

/// A tensor the model needs: its name and shape (row-major, `[out, in]` for projections).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// HF tensor name.
    pub name: String,
    /// Shape, outermost first.
    pub shape: Vec<usize>,
}

impl TensorSpec {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Every tensor a model with this config stores, in checkpoint order (the list lives in
/// [`crate::layer::tensors`]).
pub fn expected_tensors(cfg: &ModelConfig) -> Vec<TensorSpec> {
    crate::layer::tensors(cfg)
        .into_iter()
        .map(|(name, shape)| TensorSpec { name, shape })
        .collect()
}

/// Checks that every tensor the config needs is in the files, in a supported dtype and
/// with the right shape. Extra tensors (e.g. a redundant `lm_head.weight` when tied) are ignored.
pub fn check_model_files(files: &ModelFiles) -> Result<()> {
    for spec in expected_tensors(files.config()) {
        let view = files.tensor(&spec.name)?;
        if view.shape != spec.shape {
            return Err(LlmError::ShapeMismatch {
                path: files
                    .file_of(&spec.name)
                    .unwrap_or(files.dir())
                    .to_path_buf(),
                tensor: spec.name,
                expected: spec.shape,
                found: view.shape,
            });
        }
    }
    Ok(())
}

/// The tensor's elements as f32 (exact for all three dtypes).
pub fn to_f32(view: &TensorView<'_>) -> Vec<f32> {
    let b = view.bytes;
    match view.dtype {
        DType::F32 => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        DType::F16 => b
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        DType::BF16 => b
            .chunks_exact(2)
            .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
    }
}

/// All tensors the config needs, checked and converted to f32, by name.
pub fn load_f32(files: &ModelFiles) -> Result<HashMap<String, Vec<f32>>> {
    check_model_files(files)?;
    expected_tensors(files.config())
        .into_iter()
        .map(|spec| Ok((spec.name.clone(), to_f32(&files.tensor(&spec.name)?))))
        .collect()
}

/// The seed of the built-in synthetic models (`synthetic:NAME`).
pub const DEFAULT_SEED: u64 = 0x736c_7569_6365;

/// Synthetic values of one tensor are uniform in `center ± half_width`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Uniform {
    /// Middle of the range.
    pub center: f32,
    /// Half of the range's width.
    pub half_width: f32,
}

/// The range synthetic values of a tensor are drawn from: norm weights `1 ± 0.1`; biases
/// `± 0.5`;
/// embedding and LM head `±sqrt(3/hidden)` (entries of std 1/sqrt(hidden): logits of std ≈ 1);
/// projections `±sqrt(3/fan_in)` (std 1/sqrt(fan_in): activations keep their scale, so the
/// residual stream outweighs the token's own embedding and greedy decoding does not lock
/// onto repeating the input token).
pub fn synthetic_init(cfg: &ModelConfig, spec: &TensorSpec) -> Uniform {
    if spec.name.ends_with("norm.weight") {
        Uniform {
            center: 1.0,
            half_width: 0.1,
        }
    } else if spec.name.ends_with(".bias") {
        // Qwen2's q/k/v biases: of the order of the projections' outputs.
        Uniform {
            center: 0.0,
            half_width: 0.5,
        }
    } else if spec.name == EMBED || spec.name == LM_HEAD {
        Uniform {
            center: 0.0,
            half_width: (3.0 / cfg.hidden as f32).sqrt(),
        }
    } else {
        let fan_in = spec.shape.last().copied().unwrap_or(1).max(1);
        Uniform {
            center: 0.0,
            half_width: (3.0 / fan_in as f32).sqrt(),
        }
    }
}

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// splitmix64's output function.
#[inline]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The per-tensor stream key: a hash of (seed, tensor name).
fn tensor_key(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix64(mix64(seed ^ GOLDEN) ^ h)
}

/// Element `index` of the synthetic stream `key` (counter-based: any element can be computed alone).
#[inline]
fn synth_value(key: u64, init: Uniform, index: u64) -> f32 {
    let z = mix64(key.wrapping_add(index.wrapping_add(1).wrapping_mul(GOLDEN)));
    let u = (z >> 40) as f32 * (1.0 / (1u32 << 24) as f32);
    init.center + init.half_width * (2.0 * u - 1.0)
}

/// Writes elements `first..first + out.len() / dtype.size()` of the synthetic tensor `spec`
/// (deterministic in `seed` and the tensor name) into `out` as little-endian `dtype`,
/// so a tensor can be produced chunk by chunk straight into a staging buffer.
pub fn synthetic_fill(
    cfg: &ModelConfig,
    seed: u64,
    spec: &TensorSpec,
    dtype: DType,
    first: usize,
    out: &mut [u8],
) -> Result<()> {
    let es = dtype.size();
    let n = out.len() / es;
    if !out.len().is_multiple_of(es) || first.checked_add(n).is_none_or(|end| end > spec.numel()) {
        return Err(LlmError::InvalidArgument(format!(
            "synthetic tensor {:?} has {} elements of {dtype}; cannot fill {} bytes from element {first}",
            spec.name,
            spec.numel(),
            out.len()
        )));
    }
    let key = tensor_key(seed, &spec.name);
    let init = synthetic_init(cfg, spec);
    const CHUNK: usize = 512;
    let mut fbuf = [0f32; CHUNK];
    let mut hbuf = [f16::ZERO; CHUNK];
    let mut bbuf = [bf16::ZERO; CHUNK];
    for (c, dst) in out.chunks_mut(CHUNK * es).enumerate() {
        let m = dst.len() / es;
        let base = (first + c * CHUNK) as u64;
        for (j, f) in fbuf[..m].iter_mut().enumerate() {
            *f = synth_value(key, init, base + j as u64);
        }
        match dtype {
            DType::F32 => {
                for (d, f) in dst.chunks_exact_mut(4).zip(&fbuf[..m]) {
                    d.copy_from_slice(&f.to_le_bytes());
                }
            }
            DType::F16 => {
                hbuf[..m].convert_from_f32_slice(&fbuf[..m]);
                for (d, h) in dst.chunks_exact_mut(2).zip(&hbuf[..m]) {
                    d.copy_from_slice(&h.to_le_bytes());
                }
            }
            DType::BF16 => {
                bbuf[..m].convert_from_f32_slice(&fbuf[..m]);
                for (d, h) in dst.chunks_exact_mut(2).zip(&bbuf[..m]) {
                    d.copy_from_slice(&h.to_le_bytes());
                }
            }
        }
    }
    Ok(())
}

/// The whole synthetic tensor as little-endian `dtype` bytes, generated on all cores.
pub fn synthetic_tensor_bytes(
    cfg: &ModelConfig,
    seed: u64,
    spec: &TensorSpec,
    dtype: DType,
) -> Vec<u8> {
    let es = dtype.size();
    let numel = spec.numel();
    let mut out = vec![0u8; numel * es];
    if numel == 0 {
        return out;
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(numel / (1 << 16))
        .max(1);
    let per = numel.div_ceil(threads);
    std::thread::scope(|s| {
        for (t, chunk) in out.chunks_mut(per * es).enumerate() {
            s.spawn(move || synthetic_fill(cfg, seed, spec, dtype, t * per, chunk));
        }
    });
    out
}

/// The synthetic tensor as f32 values, after rounding to `dtype` (what a GPU holding
/// `dtype` weights computes with).
pub fn synthetic_tensor_f32(
    cfg: &ModelConfig,
    seed: u64,
    spec: &TensorSpec,
    dtype: DType,
) -> Vec<f32> {
    let bytes = synthetic_tensor_bytes(cfg, seed, spec, dtype);
    to_f32(&TensorView {
        dtype,
        shape: spec.shape.clone(),
        bytes: &bytes,
    })
}

/// All synthetic tensors of a config as f32 (rounded through `dtype`), by name.
pub fn synthetic_f32(cfg: &ModelConfig, seed: u64, dtype: DType) -> HashMap<String, Vec<f32>> {
    expected_tensors(cfg)
        .into_iter()
        .map(|spec| {
            let v = synthetic_tensor_f32(cfg, seed, &spec, dtype);
            (spec.name, v)
        })
        .collect()
}

/// Writes a Hugging Face model directory (`config.json` + `model.safetensors`) for the
/// synthetic model `name` (as [`ModelConfig::synthetic`], optional `synthetic:` prefix)
/// with weights in `dtype` from [`DEFAULT_SEED`]; tensors are streamed one at a time.
pub fn write_synthetic_hf_dir(
    dir: impl AsRef<Path>,
    name: &str,
    dtype: DType,
) -> Result<ModelConfig> {
    let dir = dir.as_ref();
    let cfg = ModelConfig::synthetic(name.strip_prefix("synthetic:").unwrap_or(name))?;
    std::fs::create_dir_all(dir).map_err(|e| LlmError::io(dir, "create", e))?;
    let mut json = cfg.to_hf_json();
    let torch_dtype = match dtype {
        DType::BF16 => "bfloat16",
        DType::F16 => "float16",
        DType::F32 => "float32",
    };
    json["torch_dtype"] = torch_dtype.into();
    let cfg_path = dir.join(CONFIG_FILE);
    let text = serde_json::to_string_pretty(&json).expect("a JSON value always serializes");
    std::fs::write(&cfg_path, text).map_err(|e| LlmError::io(&cfg_path, "write", e))?;
    let specs = expected_tensors(&cfg);
    let list: Vec<(String, DType, Vec<usize>)> = specs
        .iter()
        .map(|s| (s.name.clone(), dtype, s.shape.clone()))
        .collect();
    let wpath = dir.join(WEIGHTS_FILE);
    write_safetensors_with(&wpath, &list, |i, w: &mut dyn Write| {
        let bytes = synthetic_tensor_bytes(&cfg, DEFAULT_SEED, &specs[i], dtype);
        w.write_all(&bytes)
            .map_err(|e| LlmError::io(&wpath, "write", e))
    })?;
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::safetensors::{write_safetensors, TestDir};

    fn spec(name: &str, shape: &[usize]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            shape: shape.to_vec(),
        }
    }

    #[test]
    fn expected_tensor_lists() {
        let tiny = ModelConfig::synthetic("tiny").unwrap();
        let t = expected_tensors(&tiny);
        assert_eq!(t.len(), 1 + 2 * 11 + 1);
        assert!(t.iter().all(|s| s.name != LM_HEAD), "tied: no lm_head");
        let find =
            |list: &[TensorSpec], n: &str| list.iter().find(|s| s.name == n).unwrap().shape.clone();
        assert_eq!(find(&t, "model.layers.1.self_attn.q_proj.weight"), [64, 64]);
        assert_eq!(find(&t, "model.layers.1.self_attn.k_proj.weight"), [32, 64]);
        assert_eq!(find(&t, "model.layers.0.self_attn.o_proj.weight"), [64, 64]);
        assert_eq!(find(&t, "model.layers.0.self_attn.k_norm.weight"), [16]);
        assert_eq!(find(&t, "model.layers.0.mlp.down_proj.weight"), [64, 192]);
        let ll = ModelConfig::synthetic("tiny-llama").unwrap();
        let t = expected_tensors(&ll);
        assert_eq!(t.len(), 1 + 3 * 9 + 2);
        assert!(
            !t.iter().any(|s| s.name.contains("q_norm")),
            "llama: no q/k norm"
        );
        assert_eq!(find(&t, LM_HEAD), [300, 96]);
        assert_eq!(find(&t, "model.layers.2.self_attn.q_proj.weight"), [96, 96]);
        let q = ModelConfig::synthetic("qwen3-0.6b").unwrap();
        let t = expected_tensors(&q);
        assert_eq!(
            find(&t, "model.layers.27.self_attn.q_proj.weight"),
            [2048, 1024]
        );
        assert_eq!(
            find(&t, "model.layers.27.self_attn.o_proj.weight"),
            [1024, 2048]
        );
    }

    #[test]
    fn synthetic_is_deterministic_and_distinct_per_tensor() {
        let cfg = ModelConfig::synthetic("tiny").unwrap();
        let a = spec("model.layers.0.mlp.up_proj.weight", &[192, 64]);
        let b = spec("model.layers.1.mlp.up_proj.weight", &[192, 64]);
        let x1 = synthetic_tensor_f32(&cfg, 7, &a, DType::F32);
        let x2 = synthetic_tensor_f32(&cfg, 7, &a, DType::F32);
        let y = synthetic_tensor_f32(&cfg, 7, &b, DType::F32);
        let z = synthetic_tensor_f32(&cfg, 8, &a, DType::F32);
        assert_eq!(x1, x2);
        let same = |p: &[f32], q: &[f32]| p.iter().zip(q).filter(|(u, v)| u == v).count();
        assert!(same(&x1, &y) < 10 && same(&x1, &z) < 10);
        // range and spread: uniform in ±sqrt(3/64)
        let lim = (3.0f32 / 64.0).sqrt();
        assert!(x1.iter().all(|v| v.abs() <= lim));
        let mean = x1.iter().sum::<f32>() / x1.len() as f32;
        let var = x1.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / x1.len() as f32;
        assert!(
            mean.abs() < 0.01 && (var.sqrt() - lim / 3f32.sqrt()).abs() < 0.005,
            "{mean} {var}"
        );
        let n = synthetic_tensor_f32(&cfg, 7, &spec("model.norm.weight", &[64]), DType::F32);
        assert!(n.iter().all(|v| (0.9..=1.1).contains(v)) && n.iter().any(|&v| v != 1.0));
        // rounding through a dtype is what to_f32 of the bytes gives
        let h = synthetic_tensor_f32(&cfg, 7, &a, DType::BF16);
        assert!(h
            .iter()
            .zip(&x1)
            .all(|(p, q)| p.to_bits() == half::bf16::from_f32(*q).to_f32().to_bits()));
    }

    #[test]
    fn synthetic_fill_in_chunks_equals_whole() {
        let cfg = ModelConfig::synthetic("qwen3-0.6b").unwrap();
        let s = spec(EMBED, &[3000, 70]);
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let whole = synthetic_tensor_bytes(&cfg, 1, &s, dtype);
            let es = dtype.size();
            let mut parts = vec![0u8; whole.len()];
            let mut first = 0;
            for (i, c) in parts.chunks_mut(es * 777).enumerate() {
                synthetic_fill(&cfg, 1, &s, dtype, i * 777, c).unwrap();
                first += c.len() / es;
            }
            assert_eq!(first, s.numel());
            assert_eq!(parts, whole, "{dtype}");
        }
        let e = synthetic_fill(&cfg, 1, &s, DType::F16, s.numel() - 1, &mut [0u8; 4]).unwrap_err();
        assert!(e.to_string().contains("210000 elements"), "{e}");
    }

    #[test]
    fn synthetic_generation_is_fast() {
        let cfg = ModelConfig::synthetic("qwen3-4b").unwrap();
        let s = spec("model.layers.0.mlp.up_proj.weight", &[9728, 2560]);
        let t = std::time::Instant::now();
        let b = synthetic_tensor_bytes(&cfg, DEFAULT_SEED, &s, DType::F16);
        let secs = t.elapsed().as_secs_f64();
        let rate = s.numel() as f64 / secs / 1e6;
        eprintln!(
            "synthetic f16: {:.0} M elements/s ({} MB in {secs:.3}s)",
            rate,
            b.len() >> 20
        );
        assert!(b.iter().any(|&x| x != 0));
    }

    #[test]
    fn synthetic_dir_loads_and_matches_in_memory() {
        for (name, dtype) in [
            ("tiny", DType::BF16),
            ("tiny-llama", DType::F16),
            ("tiny", DType::F32),
        ] {
            let d = TestDir::new("w-dir");
            let cfg = write_synthetic_hf_dir(&d.0, name, dtype).unwrap();
            let files = ModelFiles::open(&d.0).unwrap();
            assert_eq!(files.config(), &cfg);
            check_model_files(&files).unwrap();
            let loaded = load_f32(&files).unwrap();
            let mem = synthetic_f32(&cfg, DEFAULT_SEED, dtype);
            assert_eq!(loaded, mem, "{name} {dtype}");
            for s in expected_tensors(&cfg) {
                assert_eq!(files.tensor(&s.name).unwrap().dtype, dtype);
            }
        }
    }

    #[test]
    fn check_reports_missing_and_misshaped_tensors() {
        let d = TestDir::new("w-bad");
        let cfg = write_synthetic_hf_dir(&d.0, "tiny-llama", DType::F32).unwrap();
        let specs = expected_tensors(&cfg);
        let bytes: Vec<Vec<u8>> = specs
            .iter()
            .map(|s| synthetic_tensor_bytes(&cfg, 0, s, DType::F32))
            .collect();
        let path = d.join("model.safetensors");
        let rewrite = |skip: Option<&str>, reshape: Option<(&str, Vec<usize>)>| {
            let mut list: Vec<(&str, DType, Vec<usize>, &[u8])> = Vec::new();
            for (s, b) in specs.iter().zip(&bytes) {
                if Some(s.name.as_str()) == skip {
                    continue;
                }
                let shape = match &reshape {
                    Some((n, sh)) if *n == s.name => sh.clone(),
                    _ => s.shape.clone(),
                };
                list.push((&s.name, DType::F32, shape, b));
            }
            let refs: Vec<(&str, DType, &[usize], &[u8])> = list
                .iter()
                .map(|(n, d, s, b)| (*n, *d, s.as_slice(), *b))
                .collect();
            write_safetensors(&path, &refs).unwrap();
        };
        let q = "model.layers.1.self_attn.q_proj.weight";
        rewrite(Some(q), None);
        let m = check_model_files(&ModelFiles::open(&d.0).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            m.contains(q) && m.contains("missing") && m.contains(&*d.0.to_string_lossy()),
            "{m}"
        );
        let k = "model.layers.2.self_attn.k_proj.weight";
        rewrite(None, Some((k, vec![96, 32])));
        let m = check_model_files(&ModelFiles::open(&d.0).unwrap())
            .unwrap_err()
            .to_string();
        assert!(m.contains("model.safetensors") && m.contains(k), "{m}");
        assert!(m.contains("shape [96, 32], expected [32, 96]"), "{m}");
    }
}
