//! Opening a model by name: `synthetic:NAME` (deterministic random weights with real
//! shapes, no download) or a Hugging Face model directory.

use std::borrow::Cow;

use sluice::Device;
use sluice_kernels::WeightDtype;

use crate::config::ModelConfig;
use crate::error::LlmError;
use crate::gpu::{GpuModel, GpuOptions, TensorData};
use crate::safetensors::{DType, ModelFiles};
use crate::tokenizer::Tokenizer;
use crate::weights::{check_model_files, expected_tensors, synthetic_tensor_bytes, DEFAULT_SEED};

/// How to open a model.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Weight dtype on the GPU; default: as stored (synthetic models: f16).
    pub dtype: Option<WeightDtype>,
    /// GPU model options (context length, fusion).
    pub gpu: GpuOptions,
    /// Seed of synthetic weights.
    pub seed: u64,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            dtype: None,
            gpu: GpuOptions::default(),
            seed: DEFAULT_SEED,
        }
    }
}

/// An opened model.
pub struct Loaded {
    /// The model on the GPU.
    pub model: GpuModel,
    /// Weight dtype on the GPU ("f16", "bf16", "f32").
    pub dtype: String,
    /// The tokenizer, when the directory has `tokenizer.json`.
    pub tokenizer: Option<Tokenizer>,
}

/// Largest KV-cache capacity accepted, in tokens (also keeps positions within u32).
pub const MAX_CONTEXT: usize = 1 << 20;

/// Largest prefill chunk accepted, in tokens.
pub const MAX_PREFILL_CHUNK: usize = 256;

/// Checks the GPU options against the config with checked arithmetic, before anything is
/// allocated: context and prefill chunk in range, and the KV cache
/// (`context * kv_heads * head_dim * layers * 2 (K and V) * 2 bytes`), the per-chunk
/// scratch and the weights all computable in u64 and within `MAX_DEVICE_BYTES`.
pub fn check_gpu_options(config: &ModelConfig, options: &GpuOptions) -> Result<(), LlmError> {
    let c = config;
    let o = options;
    let bad = |msg: String| Err(LlmError::InvalidArgument(msg));
    if o.context == 0 || o.context > MAX_CONTEXT {
        return bad(format!(
            "context {} tokens: must be in 1..={MAX_CONTEXT}",
            o.context
        ));
    }
    if o.prefill_chunk == 0 || o.prefill_chunk > MAX_PREFILL_CHUNK {
        return bad(format!(
            "prefill chunk {} tokens: must be in 1..={MAX_PREFILL_CHUNK}",
            o.prefill_chunk
        ));
    }
    if o.attention_chunk == 0 || o.attention_chunk > 256 {
        return bad(format!(
            "attention chunk {} must be in 1..=256",
            o.attention_chunk
        ));
    }
    let mul = |xs: &[usize]| -> Option<u64> {
        xs.iter()
            .try_fold(1u64, |acc, &x| acc.checked_mul(x as u64))
    };
    let kv = mul(&[o.context, c.kv_heads, c.head_dim, c.layers, 2, 2]).ok_or_else(|| {
        LlmError::InvalidArgument(format!(
            "KV cache size overflows: context {} x kv_heads {} x head_dim {} x layers {} x 2 x 2 bytes",
            o.context, c.kv_heads, c.head_dim, c.layers
        ))
    })?;
    let chunk = o.prefill_chunk;
    let splits = o.context.div_ceil(o.attention_chunk as usize);
    let scratch = [
        mul(&[c.hidden + 8, chunk, 4]),
        mul(&[c.heads + 2 * c.kv_heads + 3, c.head_dim + 64, chunk, 4]),
        mul(&[c.heads, splits, c.head_dim + 2, chunk, 4]),
        mul(&[c.intermediate + 8, chunk, 4]),
        mul(&[c.vocab, 4]),
        mul(&[o.context, 4]),
    ]
    .into_iter()
    .try_fold(0u64, |acc, x| acc.checked_add(x?));
    let weights = c
        .parameter_count()
        .and_then(|p| p.checked_mul(o.weight_dtype.bytes() as u64));
    let total = scratch
        .and_then(|s| s.checked_add(kv))
        .and_then(|s| s.checked_add(weights?));
    match total {
        Some(t) if t <= MAX_DEVICE_BYTES => {
            log::debug!(
                "sizes: KV cache {kv} bytes (context {}), weights {} bytes, total {t} bytes",
                o.context,
                weights.unwrap_or(0)
            );
            Ok(())
        }
        Some(t) => bad(format!(
            "model needs {t} bytes (KV cache {kv} bytes for context {}), more than the {MAX_DEVICE_BYTES} bytes any device has",
            o.context
        )),
        None => bad(format!(
            "model size overflows 64 bits (context {}, prefill chunk {chunk})",
            o.context
        )),
    }
}

/// How many values of a stored tensor are NaN or ±inf (exponent bits all set).
pub fn count_nonfinite(dtype: DType, bytes: &[u8]) -> usize {
    match dtype {
        DType::F16 | DType::BF16 => {
            let mask: u16 = if dtype == DType::F16 { 0x7c00 } else { 0x7f80 };
            bytes
                .chunks_exact(2)
                .filter(|c| u16::from_le_bytes([c[0], c[1]]) & mask == mask)
                .count()
        }
        DType::F32 => bytes
            .chunks_exact(4)
            .filter(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) & 0x7f80_0000 == 0x7f80_0000)
            .count(),
    }
}

/// Logs (debug) the choices the GPU model makes from these options and config.
fn log_decisions(c: &ModelConfig, o: &GpuOptions) {
    log::debug!(
        "kernel variants: {:?} weights, matvec {} threads per row{}, fused gate/up {}, fused norm {}, fused attention {}",
        o.weight_dtype,
        o.matvec_threads_per_row
            .unwrap_or_else(|| sluice_kernels::matvec_threads_per_row(c.hidden as u32)),
        if o.matvec_threads_per_row.is_some() { " (asked for)" } else { " (default)" },
        o.fuse_gate_up,
        o.fuse_norm,
        o.fuse_attention
    );
    if !(c.heads * c.head_dim).is_multiple_of(8) && o.prefill_chunk > 1 {
        log::debug!(
            "prefill chunk forced from {} to 1: heads {} x head_dim {} is not a multiple of 8 (16-byte strides)",
            o.prefill_chunk,
            c.heads,
            c.head_dim
        );
    }
    if let Some(s) = &o.sampling {
        log::debug!("sampling on the GPU: {s:?}");
    }
}

/// Upper bound on what one model may need on a device (1 TiB); larger requests are
/// refused before any allocation.
pub const MAX_DEVICE_BYTES: u64 = 1 << 40;

/// The model the main job uses on `device`: Qwen3-0.6B shapes on a GPU, the tiny
/// Qwen3-shaped model on a CPU driver (lavapipe decodes ~1 GB of weights far too slowly).
pub fn default_model(device: &Device) -> &'static str {
    if device.info().device_type == "cpu" {
        "synthetic:tiny"
    } else {
        "synthetic:qwen3-0.6b"
    }
}

/// The kernel dtype for a file dtype.
pub fn weight_dtype(d: DType) -> WeightDtype {
    match d {
        DType::F16 => WeightDtype::F16,
        DType::BF16 => WeightDtype::Bf16,
        DType::F32 => WeightDtype::F32,
    }
}

fn file_dtype(d: WeightDtype) -> DType {
    match d {
        WeightDtype::F16 => DType::F16,
        WeightDtype::Bf16 => DType::BF16,
        WeightDtype::F32 => DType::F32,
    }
}

/// Opens `spec` (`synthetic:NAME` or a directory) and uploads it to `device`.
pub fn open_model(
    device: &Device,
    spec: &str,
    options: &LoadOptions,
    progress: impl FnMut(u64, u64),
) -> Result<Loaded, LlmError> {
    if let Some(name) = spec.strip_prefix("synthetic:") {
        let config = ModelConfig::synthetic(name)?;
        let dtype = options.dtype.unwrap_or(WeightDtype::F16);
        let specs = expected_tensors(&config);
        let gpu = GpuOptions {
            weight_dtype: dtype,
            ..options.gpu.clone()
        };
        check_gpu_options(&config, &gpu)?;
        log_decisions(&config, &gpu);
        let model = GpuModel::load(
            device,
            &config,
            gpu,
            |tensor| {
                let spec = specs.iter().find(|s| s.name == tensor).ok_or_else(|| {
                    LlmError::MissingTensor {
                        path: format!("synthetic:{name}").into(),
                        tensor: tensor.to_string(),
                    }
                })?;
                let bytes = synthetic_tensor_bytes(&config, options.seed, spec, file_dtype(dtype));
                Ok(TensorData::Raw {
                    dtype,
                    bytes: Cow::Owned(bytes),
                })
            },
            progress,
        )?;
        return Ok(Loaded {
            model,
            dtype: dtype.name().into(),
            tokenizer: None,
        });
    }
    let files = ModelFiles::open(spec)?;
    check_model_files(&files)?;
    let config = files.config().clone();
    let stored = files.tensor("model.embed_tokens.weight")?.dtype;
    let dtype = options.dtype.unwrap_or(weight_dtype(stored));
    let gpu = GpuOptions {
        weight_dtype: dtype,
        ..options.gpu.clone()
    };
    check_gpu_options(&config, &gpu)?;
    log_decisions(&config, &gpu);
    let model = GpuModel::load(
        device,
        &config,
        gpu,
        |name| {
            let view = files.tensor(name)?;
            let bad = count_nonfinite(view.dtype, view.bytes);
            if bad > 0 {
                return Err(LlmError::InvalidArgument(format!(
                    "{spec}: tensor {name:?} has {bad} NaN or infinite values: the model would produce NaN logits"
                )));
            }
            Ok(TensorData::Raw {
                dtype: weight_dtype(view.dtype),
                bytes: Cow::Borrowed(view.bytes),
            })
        },
        progress,
    )?;
    let tokenizer = files
        .tokenizer_path()
        .map(Tokenizer::from_hf_file)
        .transpose()?;
    Ok(Loaded {
        model,
        dtype: dtype.name().into(),
        tokenizer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonfinite_values_are_counted_per_dtype() {
        let f16: Vec<u8> = [1.0f32, f32::NAN, f32::INFINITY, -2.0, f32::NEG_INFINITY]
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect();
        assert_eq!(count_nonfinite(DType::F16, &f16), 3);
        let bf16: Vec<u8> = [f32::NAN, 65504.0, 3e38]
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect();
        assert_eq!(count_nonfinite(DType::BF16, &bf16), 1);
        let f32s: Vec<u8> = [f32::MAX, f32::NAN, 0.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(count_nonfinite(DType::F32, &f32s), 1);
    }

    #[test]
    fn gpu_options_are_bounded_before_allocation() {
        let c = ModelConfig::synthetic("tiny").unwrap();
        let ok = GpuOptions::default();
        check_gpu_options(&c, &ok).unwrap();
        for (context, chunk, want) in [
            (0, 16, "context 0"),
            (4_611_686_018_427_388_004, 16, "must be in 1..="),
            (MAX_CONTEXT + 1, 16, "must be in 1..="),
            (512, 0, "prefill chunk 0"),
            (512, MAX_PREFILL_CHUNK + 1, "prefill chunk"),
        ] {
            let o = GpuOptions {
                context,
                prefill_chunk: chunk,
                ..GpuOptions::default()
            };
            let e = check_gpu_options(&c, &o).unwrap_err().to_string();
            assert!(e.contains(want), "{context} {chunk}: {e}");
        }
        // A config whose KV cache at the largest context exceeds any device.
        let big = ModelConfig {
            layers: 1024,
            kv_heads: 1024,
            heads: 1024,
            head_dim: 1024,
            ..c
        };
        let o = GpuOptions {
            context: MAX_CONTEXT,
            ..GpuOptions::default()
        };
        let e = check_gpu_options(&big, &o).unwrap_err().to_string();
        assert!(
            e.contains("more than the") || e.contains("overflows"),
            "{e}"
        );
    }
}
