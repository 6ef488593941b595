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
    let model = GpuModel::load(
        device,
        &config,
        gpu,
        |name| {
            let view = files.tensor(name)?;
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
