//! Opening a model by name: `synthetic:NAME` (deterministic random weights with real
//! shapes, no download) or a Hugging Face model directory.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use sluice::Device;
use sluice_kernels as k;
use sluice_kernels::WeightDtype;

use crate::config::ModelConfig;
use crate::error::LlmError;
use crate::gpu::{GpuModel, GpuOptions, TensorData};
use crate::safetensors::{DType, ModelFiles};
use crate::tokenizer::Tokenizer;
use crate::weights::TensorSpec;
use crate::weights::{
    check_model_files, expected_tensors, synthetic_tensor_bytes, DEFAULT_SEED, EMBED,
};

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

/// Bytes of the weights of `config` in `dtype` on the GPU, or an error when that
/// overflows.
fn weight_estimate(config: &ModelConfig, dtype: WeightDtype) -> Result<u64, LlmError> {
    let fallback = WeightDtype::F16; // what rows that fit no block become (see target_dtype)
    crate::gpu::weight_bytes(config, dtype)
        .or_else(|| crate::gpu::weight_bytes(config, fallback))
        .ok_or_else(|| {
            LlmError::InvalidArgument(format!(
                "the weights of a model with {} layers, hidden {}, intermediate {} and vocabulary {} \
                 overflow 64-bit byte counts",
                config.layers, config.hidden, config.intermediate, config.vocab
            ))
        })
}

/// The format a `[rows, cols]` matrix gets when `dtype` is asked for: `dtype` itself when
/// its rows are whole blocks, else the nearest format whose blocks fit (Q8_0 for rows of
/// 32, else f16), as llama.cpp's quantizer falls back.
pub fn target_dtype(dtype: WeightDtype, cols: usize) -> WeightDtype {
    if dtype.row_bytes(cols).is_some() {
        dtype
    } else if WeightDtype::Q8_0.row_bytes(cols).is_some() {
        WeightDtype::Q8_0
    } else {
        WeightDtype::F16
    }
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
    stored: WeightDtype,
    bytes: &'a [u8],
    shape: &[usize],
    asked: Option<WeightDtype>,
) -> TensorData<'a> {
    let (rows, cols) = match shape {
        [r, c] => (*r, *c),
        _ => (1, bytes.len()),
    };
    let target = match asked {
        Some(d) if shape.len() == 2 => target_dtype(d, cols),
        _ => stored,
    };
    if target == stored {
        return TensorData::Raw {
            dtype: stored,
            bytes: Cow::Borrowed(bytes),
        };
    }
    let values = k::dequantize(stored, rows, cols, bytes);
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
    let dtype = options.dtype.unwrap_or(WeightDtype::F16);
    let specs = expected_tensors(&config);
    let estimate = weight_estimate(&config, dtype)?;
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
            let target = match spec.shape.as_slice() {
                [_, cols] => target_dtype(dtype, *cols),
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
    let stored = weight_dtype(files.tensor(EMBED)?.dtype);
    let estimate = weight_estimate(&config, options.dtype.unwrap_or(stored))?;
    let model = GpuModel::load(
        device,
        &config,
        options.gpu.clone(),
        estimate,
        |name| {
            let view = files.tensor(name)?;
            Ok(in_format(
                weight_dtype(view.dtype),
                view.bytes,
                &view.shape,
                options.dtype,
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
    _device: &Device,
    path: &Path,
    _options: &LoadOptions,
    _progress: impl FnMut(u64, u64),
) -> Result<Loaded, LlmError> {
    Err(LlmError::InvalidArgument(format!(
        "{}: GGUF models are not wired yet",
        path.display()
    )))
}

/// The model's weight formats, most frequent first ("q4_k+q6_k+f32"), or the one format.
fn format_summary(model: &GpuModel) -> String {
    let mut f = model.weight_formats();
    f.sort_by(|a, b| b.1.cmp(&a.1));
    f.iter()
        .map(|(d, _)| d.name())
        .collect::<Vec<_>>()
        .join("+")
}
