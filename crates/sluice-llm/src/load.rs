//! Opening a model by name: `synthetic:NAME` (deterministic random weights with real
//! shapes, no download) or a Hugging Face model directory.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use sluice::Device;
use sluice_kernels as k;
use sluice_kernels::WeightDtype;

use crate::config::ModelConfig;
use crate::error::LlmError;
use crate::gguf::GgufFile;
use crate::gguf_model::{config_from_gguf, GgufTensors};
use crate::gpu::{layout, GpuModel, GpuOptions, TensorData};
use crate::quant_mix::{self, QuantRequest};
use crate::safetensors::{DType, ModelFiles};
use crate::tokenizer::Tokenizer;
use crate::weights::TensorSpec;
use crate::weights::{check_model_files, expected_tensors, synthetic_tensor_bytes, DEFAULT_SEED};

/// How to open a model.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Weight formats on the GPU (`--dtype`, quantized on load); default: as stored
    /// (synthetic models: f16).
    pub dtype: Option<QuantRequest>,
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
pub const MAX_PREFILL_CHUNK: usize = crate::gpu::layout::MAX_CHUNK;

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
    // KV cache, scratch and outputs: the same checked sizes the GPU model allocates.
    let sizes = crate::gpu::layout::Sizes::for_options(c, o)?;
    let kv = sizes.kv_bytes.saturating_mul(2 * c.layers as u64);
    let weights = c.parameter_count().and_then(|p| p.checked_mul(4)); // at most 4 bytes per parameter (f32)
    match weights.and_then(|w| w.checked_add(sizes.total)) {
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
            "model size overflows 64 bits (context {}, prefill chunk {})",
            o.context, o.prefill_chunk
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
        "kernel variants: matvec {} threads per row{}, fused gate/up {}, fused norm {}, fused attention {}, q8 handoff {}",
        o.matvec_threads_per_row
            .unwrap_or_else(|| sluice_kernels::matvec_threads_per_row(c.hidden as u32)),
        if o.matvec_threads_per_row.is_some() { " (asked for)" } else { " (default)" },
        o.fuse_gate_up,
        o.fuse_norm,
        o.fuse_attention,
        o.q8_handoff
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

/// GPU bytes of the weights as they will be uploaded: each matrix in the format
/// [`target_dtype`] gives it (`stored(name)`: its format as stored; `request`: `--dtype`),
/// 1-D tensors as f32; an error when that overflows. For the memory check before any
/// upload and the progress bar's total.
pub fn planned_weight_bytes(
    config: &ModelConfig,
    request: Option<&QuantRequest>,
    mut stored: impl FnMut(&str) -> Result<WeightDtype, LlmError>,
) -> Result<u64, LlmError> {
    let overflow = || {
        LlmError::InvalidArgument(format!(
            "the weights of a model with {} layers, hidden {}, intermediate {} and vocabulary {} \
             overflow 64-bit byte counts",
            config.layers, config.hidden, config.intermediate, config.vocab
        ))
    };
    let mut total = 0u64;
    for (name, shape) in crate::layer::tensors(config) {
        let bytes = match shape[..] {
            [rows, cols] => {
                let dt = target_dtype(request, config, &name, rows, cols, stored(&name)?);
                layout::matrix_bytes(dt, rows, cols)
            }
            _ => (shape.iter().product::<usize>() as u64).checked_mul(4),
        };
        total = bytes
            .and_then(|b| total.checked_add(b))
            .ok_or_else(overflow)?;
    }
    Ok(total)
}

/// The format the matrix `name` (`[rows, cols]`) gets on the GPU: `stored` when nothing
/// is asked for, else what the request's mixture picks for it (see [`crate::quant_mix`]).
pub fn target_dtype(
    request: Option<&QuantRequest>,
    cfg: &ModelConfig,
    name: &str,
    rows: usize,
    cols: usize,
    stored: WeightDtype,
) -> WeightDtype {
    let Some(req) = request else {
        return stored;
    };
    let req = QuantRequest {
        tied_embeddings: cfg.tied_embeddings,
        ..*req
    };
    let layer = name
        .strip_prefix("model.layers.")
        .and_then(|r| r.split('.').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    quant_mix::choose(&req, name, layer, cfg.layers, rows, cols)
}

/// f32 values of a `[rows, cols]` matrix -> file-layout bytes of `dtype`, rows
/// quantized in parallel.
pub fn encode(dtype: WeightDtype, rows: usize, cols: usize, v: &[f32]) -> Vec<u8> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = rows.div_ceil(threads).max(64);
    if rows <= per {
        return k::quantize(dtype, rows, cols, v);
    }
    let parts: Vec<Vec<u8>> = std::thread::scope(|s| {
        let handles: Vec<_> = v
            .chunks(per * cols)
            .map(|c| s.spawn(move || k::quantize(dtype, c.len() / cols, cols, c)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("quantizer thread"))
            .collect()
    });
    parts.concat()
}

/// Where a model comes from, parsed once from a `--model` string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelSource {
    /// `synthetic:NAME`: deterministic random weights with real shapes.
    Synthetic(String),
    /// A Hugging Face model directory (config.json + safetensors).
    HfDir(PathBuf),
    /// A GGUF file.
    Gguf(PathBuf),
}

impl ModelSource {
    /// Parses `synthetic:NAME`, a directory or a `.gguf` file (also recognised by its magic).
    pub fn parse(spec: &str) -> Result<ModelSource, LlmError> {
        if let Some(name) = spec.strip_prefix("synthetic:") {
            ModelConfig::synthetic(name)?;
            return Ok(ModelSource::Synthetic(name.to_string()));
        }
        let path = PathBuf::from(spec);
        let meta = std::fs::metadata(&path).map_err(|e| LlmError::io(&path, "open", e))?;
        if meta.is_dir() {
            return Ok(ModelSource::HfDir(path));
        }
        let mut magic = [0u8; 4];
        let is_gguf = std::fs::File::open(&path)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
            .is_ok()
            && &magic == b"GGUF";
        if is_gguf || path.extension().is_some_and(|e| e == "gguf") {
            return Ok(ModelSource::Gguf(path));
        }
        Err(LlmError::InvalidArgument(format!(
            "{}: not a model: give a Hugging Face model directory, a .gguf file or synthetic:NAME",
            path.display()
        )))
    }
}

/// The bytes of a tensor in the format asked for: as stored when that is the format (or
/// for 1-D tensors, which stay f32 on the GPU), else converted through f32.
fn in_format<'a>(
    cfg: &ModelConfig,
    name: &str,
    data: TensorData<'a>,
    shape: &[usize],
    asked: Option<&QuantRequest>,
) -> TensorData<'a> {
    let (stored, bytes) = match data {
        TensorData::Raw { dtype, bytes } => (dtype, bytes),
        f32s @ TensorData::F32(_) => return f32s,
    };
    let [rows, cols] = shape[..] else {
        return TensorData::Raw {
            dtype: stored,
            bytes,
        };
    };
    let target = target_dtype(asked, cfg, name, rows, cols, stored);
    if target == stored {
        return TensorData::Raw {
            dtype: stored,
            bytes,
        };
    }
    let values = k::dequantize(stored, rows, cols, &bytes);
    TensorData::Raw {
        dtype: target,
        bytes: Cow::Owned(encode(target, rows, cols, &values)),
    }
}

/// Opens `spec` (`synthetic:NAME`, a directory or a GGUF file) and uploads it to `device`.
pub fn open_model(
    device: &Device,
    spec: &str,
    options: &LoadOptions,
    progress: impl FnMut(u64, u64),
) -> Result<Loaded, LlmError> {
    open_source(device, &ModelSource::parse(spec)?, options, progress)
}

/// Opens a parsed model source and uploads it to `device`.
pub fn open_source(
    device: &Device,
    source: &ModelSource,
    options: &LoadOptions,
    progress: impl FnMut(u64, u64),
) -> Result<Loaded, LlmError> {
    match source {
        ModelSource::Synthetic(name) => open_synthetic(device, name, options, progress),
        ModelSource::HfDir(dir) => open_hf(device, dir, options, progress),
        ModelSource::Gguf(path) => open_gguf(device, path, options, progress),
    }
}

fn open_synthetic(
    device: &Device,
    name: &str,
    options: &LoadOptions,
    progress: impl FnMut(u64, u64),
) -> Result<Loaded, LlmError> {
    let config = ModelConfig::synthetic(name)?;
    let f16 = QuantRequest {
        kind: quant_mix::QuantKind::Float(WeightDtype::F16),
        tied_embeddings: config.tied_embeddings,
        tensor_types: Default::default(),
    };
    let request = options.dtype.unwrap_or(f16);
    let specs = expected_tensors(&config);
    check_gpu_options(&config, &options.gpu)?;
    log_decisions(&config, &options.gpu);
    let estimate = planned_weight_bytes(&config, Some(&request), |_| Ok(WeightDtype::F32))?;
    let find = |tensor: &str| -> Result<&TensorSpec, LlmError> {
        specs
            .iter()
            .find(|s| s.name == tensor)
            .ok_or_else(|| LlmError::MissingTensor {
                path: format!("synthetic:{name}").into(),
                tensor: tensor.to_string(),
            })
    };
    let model = GpuModel::load(
        device,
        &config,
        options.gpu.clone(),
        estimate,
        |tensor| {
            let spec = find(tensor)?;
            let seed = options.seed;
            let target = match spec.shape[..] {
                [rows, cols] => target_dtype(
                    Some(&request),
                    &config,
                    tensor,
                    rows,
                    cols,
                    WeightDtype::F32,
                ),
                _ => WeightDtype::F32,
            };
            let data = match target {
                WeightDtype::F16 => synthetic_tensor_bytes(&config, seed, spec, DType::F16),
                WeightDtype::Bf16 => synthetic_tensor_bytes(&config, seed, spec, DType::BF16),
                WeightDtype::F32 => synthetic_tensor_bytes(&config, seed, spec, DType::F32),
                q => {
                    let v = synthetic_tensor_bytes(&config, seed, spec, DType::F32);
                    let f = k::unpack_to_f32(WeightDtype::F32, &v);
                    encode(q, spec.shape[0], spec.shape[1], &f)
                }
            };
            Ok(TensorData::Raw {
                dtype: target,
                bytes: Cow::Owned(data),
            })
        },
        progress,
    )?;
    Ok(Loaded {
        dtype: format_summary(&model),
        model,
        tokenizer: None,
    })
}

fn open_hf(
    device: &Device,
    dir: &Path,
    options: &LoadOptions,
    progress: impl FnMut(u64, u64),
) -> Result<Loaded, LlmError> {
    let files = ModelFiles::open(dir)?;
    check_model_files(&files)?;
    let config = files.config().clone();
    check_gpu_options(&config, &options.gpu)?;
    log_decisions(&config, &options.gpu);
    let estimate = planned_weight_bytes(&config, options.dtype.as_ref(), |name| {
        Ok(weight_dtype(files.tensor(name)?.dtype))
    })?;
    let model = GpuModel::load(
        device,
        &config,
        options.gpu.clone(),
        estimate,
        |name| {
            let view = files.tensor(name)?;
            let bad = count_nonfinite(view.dtype, view.bytes);
            if bad > 0 {
                return Err(LlmError::InvalidArgument(format!(
                    "{}: tensor {name:?} has {bad} NaN or infinite values: the model would produce NaN logits",
                    dir.display()
                )));
            }
            let data = TensorData::Raw {
                dtype: weight_dtype(view.dtype),
                bytes: Cow::Borrowed(view.bytes),
            };
            Ok(in_format(
                &config,
                name,
                data,
                &view.shape,
                options.dtype.as_ref(),
            ))
        },
        progress,
    )?;
    let tokenizer = files
        .tokenizer_path()
        .map(Tokenizer::from_hf_file)
        .transpose()?;
    Ok(Loaded {
        dtype: format_summary(&model),
        model,
        tokenizer,
    })
}

fn open_gguf(
    device: &Device,
    path: &Path,
    options: &LoadOptions,
    progress: impl FnMut(u64, u64),
) -> Result<Loaded, LlmError> {
    let file = GgufFile::open(path)?;
    let config = config_from_gguf(&file)?;
    check_gpu_options(&config, &options.gpu)?;
    log_decisions(&config, &options.gpu);
    let tensors = GgufTensors::new(&file, &config);
    // The file's own mixture of formats, or what --dtype makes of it.
    let estimate = planned_weight_bytes(&config, options.dtype.as_ref(), |name| {
        Ok(tensors.locate(name)?.1)
    })?;
    let shapes: std::collections::HashMap<String, Vec<usize>> =
        crate::layer::tensors(&config).into_iter().collect();
    let model = GpuModel::load(
        device,
        &config,
        options.gpu.clone(),
        estimate,
        |name| {
            let shape = shapes.get(name).cloned().unwrap_or_default();
            Ok(in_format(
                &config,
                name,
                tensors.tensor(name)?,
                &shape,
                options.dtype.as_ref(),
            ))
        },
        progress,
    )?;
    Ok(Loaded {
        dtype: format_summary(&model),
        model,
        tokenizer: Some(Tokenizer::from_gguf(&file)?),
    })
}

/// The model's weight formats, most frequent first ("q4_k+q6_k+f32"), or the one format.
fn format_summary(model: &GpuModel) -> String {
    let mut f = model.weight_formats();
    f.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
    f.iter()
        .map(|(d, _)| d.name())
        .collect::<Vec<_>>()
        .join("+")
}
