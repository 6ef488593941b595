//! Model hyper-parameters: parsed from a Hugging Face `config.json`, or built in by
//! name for the synthetic models.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::error::{LlmError, Result};
use crate::safetensors::DType;

/// The model family, which decides tensor names, the q/k norm and the q/k/v biases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Arch {
    /// `Qwen3ForCausalLM`: Llama layout plus per-head RMSNorm on q and k.
    Qwen3,
    /// `LlamaForCausalLM` (and dense models with the same layout).
    Llama,
    /// `Qwen2ForCausalLM` (Qwen2, Qwen2.5): Llama layout plus biases on q, k and v.
    Qwen2,
}

impl Arch {
    /// The name HF writes in `architectures`.
    pub fn hf_name(self) -> &'static str {
        match self {
            Arch::Qwen3 => "Qwen3ForCausalLM",
            Arch::Llama => "LlamaForCausalLM",
            Arch::Qwen2 => "Qwen2ForCausalLM",
        }
    }

    /// The name HF writes in `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            Arch::Qwen3 => "qwen3",
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
        }
    }

    /// Whether the attention has per-head RMSNorm on q and k (before RoPE).
    pub fn has_qk_norm(self) -> bool {
        matches!(self, Arch::Qwen3)
    }

    /// Whether the q, k and v projections have biases (added before RoPE).
    pub fn has_qkv_bias(self) -> bool {
        matches!(self, Arch::Qwen2)
    }
}

/// RoPE frequency scaling: inv_freq of pair i is multiplied by
/// [`ModelConfig::rope_freq_multipliers`]`[i]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RopeScaling {
    /// Llama 3.1 / 3.2 (`rope_scaling.rope_type = "llama3"` in `config.json`): low
    /// frequencies divided by `factor`, high ones kept, a smooth blend between.
    Llama3 {
        /// Divisor of the low frequencies.
        factor: f32,
        /// Wavelengths above `original_max_positions / low_freq_factor` are scaled fully.
        low_freq_factor: f32,
        /// Wavelengths below `original_max_positions / high_freq_factor` are kept.
        high_freq_factor: f32,
        /// The context the model was pre-trained with.
        original_max_positions: usize,
    },
    /// Linear scaling (position interpolation, `rope_type = "linear"`): every inv_freq
    /// divided by `factor`.
    Linear {
        /// Divisor of every frequency.
        factor: f32,
    },
    /// Per-pair frequency divisors (llama.cpp's `rope_freqs.weight` of a GGUF file: the
    /// angle of pair i is `pos * inv_freq_i / factors[i]`), `head_dim / 2` of them.
    Factors(Vec<f32>),
}

impl RopeScaling {
    /// Multipliers of inv_freq per pair for a head of `head_dim` with base `theta`, or a
    /// message naming the bad number.
    pub fn multipliers(
        &self,
        head_dim: usize,
        theta: f32,
    ) -> std::result::Result<Vec<f32>, String> {
        let pairs = head_dim / 2;
        match self {
            RopeScaling::Llama3 {
                factor,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_positions: orig,
            } => {
                let (factor, low, high, orig) =
                    (*factor as f64, *low as f64, *high as f64, *orig as f64);
                if !(factor.is_finite() && factor >= 1.0) {
                    return Err(format!(
                        "rope_scaling factor {factor} must be a number >= 1"
                    ));
                }
                if !(low.is_finite() && high.is_finite() && low > 0.0 && high > low) {
                    return Err(format!(
                        "rope_scaling low_freq_factor {low} / high_freq_factor {high}: need 0 < low < high"
                    ));
                }
                if orig < 1.0 {
                    return Err("rope_scaling original_max_position_embeddings is 0".into());
                }
                let (low_wl, high_wl) = (orig / low, orig / high);
                Ok((0..pairs)
                    .map(|i| {
                        let inv_freq = (theta as f64).powf(-2.0 * i as f64 / head_dim as f64);
                        let wavelen = 2.0 * std::f64::consts::PI / inv_freq;
                        let m = if wavelen < high_wl {
                            1.0
                        } else if wavelen > low_wl {
                            1.0 / factor
                        } else {
                            let smooth = (orig / wavelen - low) / (high - low);
                            (1.0 - smooth) / factor + smooth
                        };
                        m as f32
                    })
                    .collect())
            }
            RopeScaling::Linear { factor } => {
                if !(factor.is_finite() && *factor > 0.0) {
                    return Err(format!(
                        "linear RoPE scaling factor {factor} must be a positive number"
                    ));
                }
                Ok(vec![1.0 / factor; pairs])
            }
            RopeScaling::Factors(f) => {
                if f.len() != pairs {
                    return Err(format!(
                        "{} RoPE frequency factors for head_dim {head_dim} (need {pairs})",
                        f.len()
                    ));
                }
                f.iter()
                    .enumerate()
                    .map(|(i, &x)| {
                        if x.is_finite() && x > 0.0 {
                            Ok(1.0 / x)
                        } else {
                            Err(format!(
                                "RoPE frequency factor {i} is {x}, need a positive number"
                            ))
                        }
                    })
                    .collect()
            }
        }
    }

    fn to_hf_json(&self) -> Value {
        match self {
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_positions,
            } => json!({
                "rope_type": "llama3",
                "factor": *factor as f64,
                "low_freq_factor": *low_freq_factor as f64,
                "high_freq_factor": *high_freq_factor as f64,
                "original_max_position_embeddings": original_max_positions,
            }),
            RopeScaling::Linear { factor } => json!({
                "rope_type": "linear",
                "factor": *factor as f64,
            }),
            // No config.json form exists for a factor list (it comes from GGUF files):
            // written under sluice's own rope type, which `from_hf_value` reads back.
            RopeScaling::Factors(f) => json!({
                "rope_type": FACTORS_ROPE_TYPE,
                "factors": f.iter().map(|&x| x as f64).collect::<Vec<_>>(),
            }),
        }
    }
}

/// The rope type [`ModelConfig::to_hf_json`] writes for [`RopeScaling::Factors`].
const FACTORS_ROPE_TYPE: &str = "sluice_freq_factors";

/// The names accepted by [`ModelConfig::synthetic`].
pub const SYNTHETIC_NAMES: &[&str] = &[
    "tiny",
    "tiny-llama",
    "tiny-qwen2",
    "tiny-llama3",
    "tiny-256",
    "tiny-gqa",
    "tiny-gqa128",
    "tiny-wide",
    "qwen3-0.6b",
    "qwen3-4b",
    "llama3.2-1b",
    "smollm2-135m",
];

/// Hyper-parameters of a dense decoder-only model (Qwen3, Qwen2 or Llama).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Model family.
    pub arch: Arch,
    /// Width of the residual stream.
    pub hidden: usize,
    /// Width of the MLP (gate/up output).
    pub intermediate: usize,
    /// Number of decoder layers.
    pub layers: usize,
    /// Number of query heads.
    pub heads: usize,
    /// Number of key/value heads (GQA); divides `heads`.
    pub kv_heads: usize,
    /// Width of one attention head (need not equal hidden / heads).
    pub head_dim: usize,
    /// Vocabulary size (rows of the embedding and of the LM head).
    pub vocab: usize,
    /// RoPE base frequency.
    pub rope_theta: f32,
    /// RoPE frequency scaling (Llama 3.1); `None`: plain RoPE.
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Whether the LM head reuses the token embedding (no `lm_head.weight`).
    pub tied_embeddings: bool,
    /// Longest context the model supports.
    pub max_positions: usize,
    /// Beginning-of-sequence token, if the config names one.
    pub bos_token: Option<u32>,
    /// End-of-sequence token, if the config names one (the first, if it names several).
    pub eos_token: Option<u32>,
}

/// Largest `hidden_size` accepted.
pub const MAX_HIDDEN: usize = 1 << 16;
/// Largest `intermediate_size` accepted.
pub const MAX_INTERMEDIATE: usize = 1 << 18;
/// Largest `num_hidden_layers` accepted.
pub const MAX_LAYERS: usize = 1024;
/// Largest `num_attention_heads` / `num_key_value_heads` accepted.
pub const MAX_HEADS: usize = 1024;
/// Largest `head_dim` accepted.
pub const MAX_HEAD_DIM: usize = 1024;
/// Largest `vocab_size` accepted.
pub const MAX_VOCAB: usize = 1 << 22;
/// Largest parameter count accepted (2^40, about 1.1 trillion).
pub const MAX_PARAMETERS: u64 = 1 << 40;
/// Largest `max_position_embeddings` (and RoPE scaling's original context) accepted.
pub const MAX_POSITIONS: usize = 1 << 24;
/// Largest `config.json` read, in bytes.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Reads a small file that must be a regular file (not a FIFO, device or directory: those
/// could block or never end) of at most `max` bytes.
pub(crate) fn read_regular(path: &Path, max: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    // Checked before opening: opening a FIFO for reading blocks until a writer comes.
    let meta = std::fs::metadata(path).map_err(|e| LlmError::io(path, "read", e))?;
    check_regular(path, &meta)?;
    if meta.len() > max {
        return Err(cfg_err(
            path,
            format!(
                "file is {} bytes, more than the {max} bytes accepted",
                meta.len()
            ),
        ));
    }
    let file = std::fs::File::open(path).map_err(|e| LlmError::io(path, "open", e))?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| LlmError::io(path, "read", e))?;
    if bytes.len() as u64 > max {
        return Err(cfg_err(
            path,
            format!("file grew past the {max} bytes accepted while being read"),
        ));
    }
    Ok(bytes)
}

/// Refuses anything but a regular file (directories, FIFOs, devices, sockets).
pub(crate) fn check_regular(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    if meta.is_file() {
        return Ok(());
    }
    let kind = if meta.is_dir() {
        "a directory"
    } else {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            let t = meta.file_type();
            if t.is_fifo() {
                "a FIFO (named pipe)"
            } else if t.is_char_device() || t.is_block_device() {
                "a device"
            } else if t.is_socket() {
                "a socket"
            } else {
                "not a regular file"
            }
        }
        #[cfg(not(unix))]
        {
            "not a regular file"
        }
    };
    Err(cfg_err(
        path,
        format!("is {kind}; a regular file is needed"),
    ))
}

fn cfg_err(path: &Path, msg: impl Into<String>) -> LlmError {
    LlmError::Config {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

/// A present, non-null field.
fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn as_usize(v: &Value, key: &str, path: &Path) -> Result<usize> {
    v.as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| {
            cfg_err(
                path,
                format!("field `{key}` must be a non-negative integer, found {v}"),
            )
        })
}

fn req_usize(obj: &Map<String, Value>, key: &str, path: &Path) -> Result<usize> {
    match field(obj, key) {
        Some(v) => as_usize(v, key, path),
        None => Err(cfg_err(path, format!("missing field `{key}`"))),
    }
}

fn opt_usize(obj: &Map<String, Value>, key: &str, path: &Path) -> Result<Option<usize>> {
    field(obj, key).map(|v| as_usize(v, key, path)).transpose()
}

fn as_f64(v: &Value, key: &str, path: &Path) -> Result<f64> {
    v.as_f64()
        .ok_or_else(|| cfg_err(path, format!("field `{key}` must be a number, found {v}")))
}

fn opt_bool(obj: &Map<String, Value>, key: &str, path: &Path) -> Result<Option<bool>> {
    field(obj, key)
        .map(|v| {
            v.as_bool().ok_or_else(|| {
                cfg_err(
                    path,
                    format!("field `{key}` must be true or false, found {v}"),
                )
            })
        })
        .transpose()
}

/// A token id field: a number, a list of numbers (first one taken), or absent/null.
fn opt_token(obj: &Map<String, Value>, key: &str, path: &Path) -> Result<Option<u32>> {
    let v = match field(obj, key) {
        None => return Ok(None),
        Some(Value::Array(a)) if a.is_empty() => return Ok(None),
        Some(Value::Array(a)) => &a[0],
        Some(v) => v,
    };
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .map(Some)
        .ok_or_else(|| {
            cfg_err(
                path,
                format!("field `{key}` must be a token id (or a list of them), found {v}"),
            )
        })
}

/// The RoPE scaling of a `rope_scaling` (or `rope_parameters`) object: none for the
/// default type, linear with its factor, Llama 3.1's with its four numbers; any other type
/// (YaRN, dynamic, ...) is refused rather than computed wrongly.
fn parse_rope_scaling(v: &Value, key: &str, path: &Path) -> Result<Option<RopeScaling>> {
    let ty = v
        .get("rope_type")
        .or_else(|| v.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let num = |name: &str| -> Result<f64> {
        match v.get(name).filter(|x| !x.is_null()) {
            Some(x) => as_f64(x, &format!("{key}.{name}"), path),
            None => Err(cfg_err(
                path,
                format!("`{key}` of type {ty:?} has no `{name}`"),
            )),
        }
    };
    match ty {
        "default" => Ok(None),
        "llama3" => {
            let orig = num("original_max_position_embeddings")?;
            if !(orig >= 1.0 && orig <= MAX_POSITIONS as f64 && orig.fract() == 0.0) {
                return Err(cfg_err(
                    path,
                    format!("`{key}.original_max_position_embeddings` is {orig}, expected an integer in 1..={MAX_POSITIONS}"),
                ));
            }
            Ok(Some(RopeScaling::Llama3 {
                factor: num("factor")? as f32,
                low_freq_factor: num("low_freq_factor")? as f32,
                high_freq_factor: num("high_freq_factor")? as f32,
                original_max_positions: orig as usize,
            }))
        }
        "linear" => Ok(Some(RopeScaling::Linear {
            factor: num("factor")? as f32,
        })),
        FACTORS_ROPE_TYPE => {
            let list = v.get("factors").and_then(Value::as_array).ok_or_else(|| {
                cfg_err(path, format!("`{key}` of type {ty:?} needs a `factors` list"))
            })?;
            if list.len() > MAX_HEAD_DIM {
                return Err(cfg_err(path, format!("`{key}.factors` has {} entries", list.len())));
            }
            let f = list
                .iter()
                .map(|x| as_f64(x, &format!("{key}.factors"), path).map(|x| x as f32))
                .collect::<Result<Vec<_>>>()?;
            Ok(Some(RopeScaling::Factors(f)))
        }
        _ => Err(cfg_err(
            path,
            format!("`{key}` with rope type {ty:?} is not supported (only the default RoPE, \"linear\" and \"llama3\")"),
        )),
    }
}

impl ModelConfig {
    /// Reads and checks a Hugging Face `config.json`.
    pub fn from_hf_json(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = read_regular(path, MAX_CONFIG_BYTES)?;
        let value: Value = serde_json::from_slice(&text).map_err(|e| LlmError::Json {
            path: path.to_path_buf(),
            source: e,
        })?;
        Self::from_hf_value(&value, path)
    }

    /// Checks an already parsed `config.json`; `path` is only used in error messages.
    pub fn from_hf_value(value: &Value, path: &Path) -> Result<Self> {
        let obj = value
            .as_object()
            .ok_or_else(|| cfg_err(path, "config is not a JSON object"))?;
        let archs = field(obj, "architectures")
            .ok_or_else(|| cfg_err(path, "missing field `architectures`"))?;
        let names: Vec<&str> = match archs {
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            Value::String(s) => vec![s.as_str()],
            other => {
                return Err(cfg_err(
                    path,
                    format!("field `architectures` must be a list of names, found {other}"),
                ))
            }
        };
        let arch = match names.as_slice() {
            ["Qwen3ForCausalLM"] => Arch::Qwen3,
            ["LlamaForCausalLM"] => Arch::Llama,
            ["Qwen2ForCausalLM"] => Arch::Qwen2,
            _ => {
                return Err(LlmError::UnsupportedArch {
                    path: path.to_path_buf(),
                    found: archs.to_string(),
                })
            }
        };

        let hidden = req_usize(obj, "hidden_size", path)?;
        let intermediate = req_usize(obj, "intermediate_size", path)?;
        let layers = req_usize(obj, "num_hidden_layers", path)?;
        let heads = req_usize(obj, "num_attention_heads", path)?;
        let kv_heads = opt_usize(obj, "num_key_value_heads", path)?.unwrap_or(heads);
        if heads == 0 {
            return Err(cfg_err(path, "num_attention_heads is 0"));
        }
        let head_dim = match opt_usize(obj, "head_dim", path)? {
            Some(d) => d,
            None => {
                if hidden % heads != 0 {
                    return Err(cfg_err(
                        path,
                        format!("no `head_dim`, and hidden_size ({hidden}) is not divisible by num_attention_heads ({heads})"),
                    ));
                }
                hidden / heads
            }
        };
        let vocab = req_usize(obj, "vocab_size", path)?;
        let rope_params = field(obj, "rope_parameters");
        let mut rope_scaling = match rope_params {
            Some(rp) => parse_rope_scaling(rp, "rope_parameters", path)?,
            None => None,
        };
        let rope_theta = match field(obj, "rope_theta")
            .or_else(|| rope_params.and_then(|rp| rp.get("rope_theta")))
        {
            Some(v) => as_f64(v, "rope_theta", path)?,
            None => 10000.0,
        };
        let rms_eps = as_f64(
            field(obj, "rms_norm_eps")
                .ok_or_else(|| cfg_err(path, "missing field `rms_norm_eps`"))?,
            "rms_norm_eps",
            path,
        )?;
        let tied_embeddings = opt_bool(obj, "tie_word_embeddings", path)?.unwrap_or(false);
        let max_positions = req_usize(obj, "max_position_embeddings", path)?;

        // Features this crate does not compute: refuse them instead of producing wrong logits.
        if let Some(v) = field(obj, "rope_scaling") {
            if let Some(r) = parse_rope_scaling(v, "rope_scaling", path)? {
                rope_scaling = Some(r);
            }
        }
        if let Some(act) = field(obj, "hidden_act") {
            if act.as_str() != Some("silu") {
                return Err(cfg_err(
                    path,
                    format!("hidden_act {act} is not supported (only \"silu\")"),
                ));
            }
        }
        // Qwen2's q/k/v biases come with the architecture; Llama's `attention_bias` would
        // also put one on o, and `mlp_bias` on the MLP: not supported.
        for key in ["attention_bias", "mlp_bias"] {
            if opt_bool(obj, key, path)? == Some(true) {
                return Err(cfg_err(
                    path,
                    format!("`{key}: true` is not supported (only Qwen2's q/k/v biases)"),
                ));
            }
        }
        if opt_bool(obj, "use_sliding_window", path)? == Some(true) {
            return Err(cfg_err(path, "`use_sliding_window: true` is not supported"));
        }

        let cfg = ModelConfig {
            arch,
            hidden,
            intermediate,
            layers,
            heads,
            kv_heads,
            head_dim,
            vocab,
            rope_theta: rope_theta as f32,
            rope_scaling,
            rms_eps: rms_eps as f32,
            tied_embeddings,
            max_positions,
            bos_token: opt_token(obj, "bos_token_id", path)?,
            eos_token: opt_token(obj, "eos_token_id", path)?,
        };
        cfg.check().map_err(|msg| cfg_err(path, msg))?;
        Ok(cfg)
    }

    /// Checks that the numbers describe a model this crate can run; the message names them.
    pub fn check(&self) -> std::result::Result<(), String> {
        for (name, v) in [
            ("hidden_size", self.hidden),
            ("intermediate_size", self.intermediate),
            ("num_hidden_layers", self.layers),
            ("num_attention_heads", self.heads),
            ("num_key_value_heads", self.kv_heads),
            ("head_dim", self.head_dim),
            ("vocab_size", self.vocab),
            ("max_position_embeddings", self.max_positions),
        ] {
            if v == 0 {
                return Err(format!("{name} is 0"));
            }
        }
        // Bounds before anything is sized from these numbers (lists of layers, tensor
        // byte counts): far above any real model, far below overflow.
        for (name, v, max) in [
            ("hidden_size", self.hidden, MAX_HIDDEN),
            ("intermediate_size", self.intermediate, MAX_INTERMEDIATE),
            ("num_hidden_layers", self.layers, MAX_LAYERS),
            ("num_attention_heads", self.heads, MAX_HEADS),
            ("num_key_value_heads", self.kv_heads, MAX_HEADS),
            ("head_dim", self.head_dim, MAX_HEAD_DIM),
            ("vocab_size", self.vocab, MAX_VOCAB),
        ] {
            if v > max {
                return Err(format!(
                    "{name} ({v}) is larger than the supported maximum {max}"
                ));
            }
        }
        let params = self.parameter_count().ok_or_else(|| {
            "the parameter count overflows 64 bits (hidden_size, intermediate_size, num_hidden_layers, vocab_size)".to_string()
        })?;
        if params > MAX_PARAMETERS {
            return Err(format!(
                "{params} parameters is more than the supported maximum {MAX_PARAMETERS}"
            ));
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(format!(
                "num_attention_heads ({}) is not divisible by num_key_value_heads ({})",
                self.heads, self.kv_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(format!(
                "head_dim ({}) must be even for rotary embeddings",
                self.head_dim
            ));
        }
        if u32::try_from(self.vocab).is_err() {
            return Err(format!(
                "vocab_size ({}) does not fit token ids in u32",
                self.vocab
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(format!(
                "rope_theta ({}) must be a positive number",
                self.rope_theta
            ));
        }
        if let Some(r) = &self.rope_scaling {
            r.multipliers(self.head_dim, self.rope_theta)?;
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0) {
            return Err(format!(
                "rms_norm_eps ({}) must be a non-negative number",
                self.rms_eps
            ));
        }
        Ok(())
    }

    /// Number of weights (matrices, norms, embeddings), or `None` when it overflows u64.
    pub fn parameter_count(&self) -> Option<u64> {
        let m = |a: usize, b: usize| (a as u64).checked_mul(b as u64);
        let q = m(self.heads, self.head_dim)?;
        let kv = m(self.kv_heads, self.head_dim)?;
        let h = self.hidden as u64;
        let per_layer = [
            q.checked_mul(h)?,
            kv.checked_mul(h)?.checked_mul(2)?,
            q.checked_mul(h)?,
            m(self.intermediate, self.hidden)?.checked_mul(3)?,
            h.checked_mul(2)?.checked_add(2 * self.head_dim as u64)?,
        ]
        .into_iter()
        .try_fold(0u64, u64::checked_add)?;
        let embed = m(self.vocab, self.hidden)?;
        let embeds = if self.tied_embeddings {
            embed
        } else {
            embed.checked_mul(2)?
        };
        per_layer
            .checked_mul(self.layers as u64)?
            .checked_add(embeds)?
            .checked_add(h)
    }

    /// The config as HF `config.json` content; [`ModelConfig::from_hf_value`] reads it back unchanged.
    pub fn to_hf_json(&self) -> Value {
        json!({
            "architectures": [self.arch.hf_name()],
            "model_type": self.arch.model_type(),
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab,
            "rope_theta": self.rope_theta as f64,
            "rope_scaling": self.rope_scaling.as_ref().map(RopeScaling::to_hf_json),
            "rms_norm_eps": self.rms_eps as f64,
            "tie_word_embeddings": self.tied_embeddings,
            "max_position_embeddings": self.max_positions,
            "bos_token_id": self.bos_token,
            "eos_token_id": self.eos_token,
            "hidden_act": "silu",
            "attention_bias": false,
            "mlp_bias": false,
            "use_sliding_window": false,
        })
    }

    /// A built-in config by name (see [`SYNTHETIC_NAMES`]): `tiny`, `tiny-llama`,
    /// `tiny-qwen2` (q/k/v biases), `tiny-llama3` (Llama 3.1 RoPE scaling), `tiny-256`,
    /// `tiny-gqa` (four query heads per key/value head), `tiny-gqa128` (the same, heads of
    /// 128 dims), `tiny-wide` (a qkv of 3072 rows, gate/up of 2048), `qwen3-0.6b`,
    /// `qwen3-4b`, `llama3.2-1b`, `smollm2-135m` (heads of 64 dims).
    /// Synthetic models have random weights, so they name no special tokens.
    pub fn synthetic(name: &str) -> Result<Self> {
        let qwen3 = |hidden, intermediate, layers, heads| ModelConfig {
            arch: Arch::Qwen3,
            hidden,
            intermediate,
            layers,
            heads,
            kv_heads: 8,
            head_dim: 128,
            vocab: 151936,
            rope_theta: 1_000_000.0,
            rope_scaling: None,
            rms_eps: 1e-6,
            tied_embeddings: true,
            max_positions: 40960,
            bos_token: None,
            eos_token: None,
        };
        Ok(match name {
            "tiny" => ModelConfig {
                arch: Arch::Qwen3,
                hidden: 64,
                intermediate: 192,
                layers: 2,
                heads: 4,
                kv_heads: 2,
                head_dim: 16,
                vocab: 256,
                rope_theta: 1_000_000.0,
                rope_scaling: None,
                rms_eps: 1e-6,
                tied_embeddings: true,
                max_positions: 4096,
                bos_token: None,
                eos_token: None,
            },
            // Four query heads per key/value head, as qwen3-4b: the batched engine's
            // grouped-query attention kernel.
            "tiny-gqa" => ModelConfig {
                heads: 8,
                ..Self::synthetic("tiny")?
            },
            // The same with heads of 128 dims, as qwen3-4b: the batched engine's
            // head_dim-128 grouped-query kernel.
            "tiny-gqa128" => ModelConfig {
                heads: 8,
                head_dim: 128,
                ..Self::synthetic("tiny")?
            },
            // Projections of 2048 rows and more (qkv 3072, gate/up 2048 each) over 64
            // columns: the batched engine's f16 matrices on matvec_batch_cmdk_f16.
            "tiny-wide" => ModelConfig {
                heads: 16,
                kv_heads: 4,
                head_dim: 128,
                intermediate: 2048,
                ..Self::synthetic("tiny")?
            },
            // Rows of 256 and 512: every block format, K-quants included, fits.
            "tiny-256" => ModelConfig {
                arch: Arch::Qwen3,
                hidden: 256,
                intermediate: 512,
                layers: 2,
                heads: 4,
                kv_heads: 2,
                head_dim: 64,
                vocab: 384,
                rope_theta: 1_000_000.0,
                rope_scaling: None,
                rms_eps: 1e-6,
                tied_embeddings: false,
                max_positions: 4096,
                bos_token: None,
                eos_token: None,
            },
            "tiny-llama" => ModelConfig {
                arch: Arch::Llama,
                hidden: 96,
                intermediate: 160,
                layers: 3,
                heads: 6,
                kv_heads: 2,
                head_dim: 16,
                vocab: 300,
                rope_theta: 10000.0,
                rope_scaling: None,
                rms_eps: 1e-5,
                tied_embeddings: false,
                max_positions: 4096,
                bos_token: None,
                eos_token: None,
            },
            // Qwen2 / Qwen2.5 layout: q/k/v biases, no q/k norm.
            "tiny-qwen2" => ModelConfig {
                arch: Arch::Qwen2,
                hidden: 64,
                intermediate: 160,
                layers: 2,
                heads: 4,
                kv_heads: 2,
                head_dim: 16,
                vocab: 272,
                rope_theta: 1_000_000.0,
                rope_scaling: None,
                rms_eps: 1e-6,
                tied_embeddings: true,
                max_positions: 4096,
                bos_token: None,
                eos_token: None,
            },
            // Llama 3.1 / 3.2 RoPE scaling with a short original context, so that at
            // head_dim 16 the pairs fall in all three bands (kept, blended, divided).
            "tiny-llama3" => ModelConfig {
                arch: Arch::Llama,
                hidden: 96,
                intermediate: 160,
                layers: 2,
                heads: 6,
                kv_heads: 2,
                head_dim: 16,
                vocab: 300,
                rope_theta: 500_000.0,
                rope_scaling: Some(RopeScaling::Llama3 {
                    factor: 8.0,
                    low_freq_factor: 1.0,
                    high_freq_factor: 4.0,
                    original_max_positions: 64,
                }),
                rms_eps: 1e-5,
                tied_embeddings: true,
                max_positions: 4096,
                bos_token: None,
                eos_token: None,
            },
            "qwen3-0.6b" => qwen3(1024, 3072, 28, 16),
            "qwen3-4b" => qwen3(2560, 9728, 36, 32),
            // Llama 3.2 1B's shapes (heads of 64 dims, Llama 3 RoPE scaling, tied
            // embeddings of 128256 tokens).
            "llama3.2-1b" => ModelConfig {
                arch: Arch::Llama,
                hidden: 2048,
                intermediate: 8192,
                layers: 16,
                heads: 32,
                kv_heads: 8,
                head_dim: 64,
                vocab: 128256,
                rope_theta: 500_000.0,
                rope_scaling: Some(RopeScaling::Llama3 {
                    factor: 32.0,
                    low_freq_factor: 1.0,
                    high_freq_factor: 4.0,
                    original_max_positions: 8192,
                }),
                rms_eps: 1e-5,
                tied_embeddings: true,
                max_positions: 131072,
                bos_token: None,
                eos_token: None,
            },
            // SmolLM2-135M's shapes (the README's model: 9 query heads of 64 dims over 3
            // key/value heads).
            "smollm2-135m" => ModelConfig {
                arch: Arch::Llama,
                hidden: 576,
                intermediate: 1536,
                layers: 30,
                heads: 9,
                kv_heads: 3,
                head_dim: 64,
                vocab: 49152,
                rope_theta: 100_000.0,
                rope_scaling: None,
                rms_eps: 1e-5,
                tied_embeddings: true,
                max_positions: 8192,
                bos_token: None,
                eos_token: None,
            },
            _ => {
                return Err(LlmError::UnknownSynthetic {
                    name: name.to_string(),
                    known: SYNTHETIC_NAMES.join(", "),
                })
            }
        })
    }

    /// Multipliers of each rotation pair's inv_freq (`head_dim / 2`), `None` without RoPE
    /// scaling. [`ModelConfig::check`] has checked that they can be computed.
    pub fn rope_freq_multipliers(&self) -> Option<Vec<f32>> {
        let r = self.rope_scaling.as_ref()?;
        r.multipliers(self.head_dim, self.rope_theta).ok()
    }

    /// Width of all query heads together (`heads * head_dim`).
    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Width of all key (or value) heads together (`kv_heads * head_dim`).
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Weights of one decoder layer's projections (q, k, v, o, gate, up, down).
    pub fn layer_projection_weights(&self) -> u64 {
        let (h, q, kv, i) = (
            self.hidden as u64,
            self.q_dim() as u64,
            self.kv_dim() as u64,
            self.intermediate as u64,
        );
        h * (q + 2 * kv) + q * h + 3 * h * i
    }

    /// Query heads per key/value head.
    pub fn group_size(&self) -> usize {
        self.heads / self.kv_heads
    }

    /// Number of weight elements over all tensors the model stores.
    pub fn num_params(&self) -> u64 {
        crate::weights::expected_tensors(self)
            .iter()
            .map(|t| t.numel() as u64)
            .sum()
    }

    /// Bytes of all weight tensors (including norm vectors) stored in `dtype`.
    pub fn weight_bytes(&self, dtype: DType) -> u64 {
        self.num_params() * dtype.size() as u64
    }

    /// Bytes of K and V cache for `positions` positions of every layer, one element of `dtype` each.
    pub fn kv_cache_bytes(&self, positions: usize, dtype: DType) -> u64 {
        2 * (self.layers * self.kv_dim() * positions * dtype.size()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::safetensors::TestDir;

    const QWEN3_06B: &str = r#"{
      "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
      "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
      "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
      "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
      "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
      "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
      "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
      "use_cache": true, "use_sliding_window": false, "vocab_size": 151936
    }"#;

    fn parse(d: &TestDir, text: &str) -> Result<ModelConfig> {
        let p = d.join("config.json");
        std::fs::write(&p, text).unwrap();
        ModelConfig::from_hf_json(&p)
    }

    fn edit(text: &str, f: impl FnOnce(&mut Map<String, Value>)) -> String {
        let mut v: Value = serde_json::from_str(text).unwrap();
        f(v.as_object_mut().unwrap());
        v.to_string()
    }

    #[test]
    fn parses_qwen3_config() {
        let d = TestDir::new("cfg-q");
        let c = parse(&d, QWEN3_06B).unwrap();
        let mut want = ModelConfig::synthetic("qwen3-0.6b").unwrap();
        want.bos_token = Some(151643);
        want.eos_token = Some(151645);
        assert_eq!(c, want);
        assert_eq!((c.q_dim(), c.kv_dim(), c.group_size()), (2048, 1024, 2));
    }

    #[test]
    fn parses_llama_config_with_defaults() {
        let d = TestDir::new("cfg-l");
        let text = r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "intermediate_size": 5632,
            "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
            "vocab_size": 32000, "rms_norm_eps": 1e-05, "max_position_embeddings": 2048,
            "bos_token_id": 1, "eos_token_id": [2, 7], "rope_scaling": null}"#;
        let c = parse(&d, text).unwrap();
        assert_eq!(c.arch, Arch::Llama);
        assert_eq!(
            (c.hidden, c.intermediate, c.layers, c.heads, c.kv_heads),
            (2048, 5632, 22, 32, 4)
        );
        assert_eq!(c.head_dim, 64, "head_dim defaults to hidden / heads");
        assert_eq!(c.rope_theta, 10000.0, "rope_theta defaults to 10000");
        assert!(!c.tied_embeddings, "tie_word_embeddings defaults to false");
        assert_eq!((c.rms_eps, c.max_positions, c.vocab), (1e-5, 2048, 32000));
        assert_eq!((c.bos_token, c.eos_token), (Some(1), Some(2)));
        // kv heads default to heads
        let c = parse(&d, &edit(text, |o| drop(o.remove("num_key_value_heads")))).unwrap();
        assert_eq!(c.kv_heads, 32);
        // rope_theta inside rope_parameters (newer transformers)
        let t = edit(text, |o| {
            o.insert(
                "rope_parameters".into(),
                serde_json::json!({"rope_type": "default", "rope_theta": 500000.0}),
            );
        });
        assert_eq!(parse(&d, &t).unwrap().rope_theta, 500000.0);
    }

    #[test]
    fn parses_llama3_rope_scaling_and_qwen2() {
        let d = TestDir::new("cfg-l3");
        // Llama-3.2-1B-Instruct's config.json (abridged).
        let llama32 = r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
            "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256, "rms_norm_eps": 1e-05,
            "max_position_embeddings": 131072, "rope_theta": 500000.0, "tie_word_embeddings": true,
            "attention_bias": false, "mlp_bias": false, "hidden_act": "silu",
            "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
            "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192, "rope_type": "llama3"}}"#;
        let c = parse(&d, llama32).unwrap();
        let want = RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_positions: 8192,
        };
        assert_eq!(c.rope_scaling, Some(want));
        let m = c.rope_freq_multipliers().unwrap();
        assert_eq!(m.len(), 32);
        assert_eq!(
            (m[0], m[31]),
            (1.0, 1.0 / 32.0),
            "high frequencies kept, low divided"
        );
        // Qwen2.5-0.5B-Instruct's config.json (abridged).
        let qwen25 = r#"{"architectures": ["Qwen2ForCausalLM"], "hidden_size": 896,
            "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
            "num_key_value_heads": 2, "vocab_size": 151936, "rms_norm_eps": 1e-06,
            "max_position_embeddings": 32768, "rope_theta": 1000000.0, "tie_word_embeddings": true,
            "hidden_act": "silu", "use_sliding_window": false, "sliding_window": 32768,
            "max_window_layers": 21, "bos_token_id": 151643, "eos_token_id": 151645}"#;
        let c = parse(&d, qwen25).unwrap();
        assert_eq!(
            (c.arch, c.head_dim, c.rope_scaling.clone()),
            (Arch::Qwen2, 64, None)
        );
        assert!(c.arch.has_qkv_bias() && !c.arch.has_qk_norm());
        // The synthetic twins read back unchanged from their config.json.
        for name in ["tiny-qwen2", "tiny-llama3"] {
            let cfg = ModelConfig::synthetic(name).unwrap();
            assert_eq!(
                ModelConfig::from_hf_value(&cfg.to_hf_json(), Path::new("t")).unwrap(),
                cfg
            );
        }
        for scaling in [
            RopeScaling::Factors(vec![1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0, 8.0]),
            RopeScaling::Linear { factor: 2.0 },
        ] {
            let scaled = ModelConfig {
                rope_scaling: Some(scaling),
                ..ModelConfig::synthetic("tiny-llama").unwrap()
            };
            let back = ModelConfig::from_hf_value(&scaled.to_hf_json(), Path::new("t")).unwrap();
            assert_eq!(back, scaled);
        }
        // HF's linear form (older configs spell the type `type`).
        let t = edit(llama32, |o| {
            o.insert(
                "rope_scaling".into(),
                serde_json::json!({"type": "linear", "factor": 4.0}),
            );
        });
        let c = parse(&d, &t).unwrap();
        assert_eq!(c.rope_scaling, Some(RopeScaling::Linear { factor: 4.0 }));
        assert_eq!(c.rope_freq_multipliers().unwrap(), vec![0.25; 32]);
    }

    #[test]
    fn config_errors_are_clear() {
        let d = TestDir::new("cfg-e");
        let check = |text: String, needles: &[&str]| {
            let m = parse(&d, &text).unwrap_err().to_string();
            assert!(m.contains("config.json"), "{m}");
            for n in needles {
                assert!(m.contains(n), "{m:?} lacks {n:?}");
            }
        };
        check(
            edit(QWEN3_06B, |o| {
                drop(o.insert(
                    "architectures".into(),
                    serde_json::json!(["MistralForCausalLM"]),
                ))
            }),
            &["unsupported architecture", "MistralForCausalLM"],
        );
        check(
            edit(QWEN3_06B, |o| drop(o.remove("hidden_size"))),
            &["missing field `hidden_size`"],
        );
        check(
            edit(QWEN3_06B, |o| drop(o.remove("architectures"))),
            &["missing field `architectures`"],
        );
        check(
            edit(QWEN3_06B, |o| {
                drop(o.insert("num_key_value_heads".into(), 3.into()))
            }),
            &["num_attention_heads (16)", "num_key_value_heads (3)"],
        );
        check(
            edit(QWEN3_06B, |o| {
                drop(o.insert("vocab_size".into(), "big".into()))
            }),
            &["vocab_size", "\"big\""],
        );
        check(
            edit(QWEN3_06B, |o| {
                o.insert(
                    "rope_scaling".into(),
                    serde_json::json!({"rope_type": "llama3", "factor": 8.0}),
                );
            }),
            &["llama3", "original_max_position_embeddings"],
        );
        check(
            edit(QWEN3_06B, |o| {
                o.insert(
                    "rope_scaling".into(),
                    serde_json::json!({"type": "yarn", "factor": 4.0}),
                );
            }),
            &["yarn", "not supported"],
        );
        check(
            edit(QWEN3_06B, |o| {
                o.insert(
                    "rope_scaling".into(),
                    serde_json::json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                        "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}),
                );
            }),
            &["low_freq_factor 4", "need 0 < low < high"],
        );
        check(
            edit(QWEN3_06B, |o| {
                drop(o.insert("attention_bias".into(), true.into()))
            }),
            &["attention_bias"],
        );
        check(
            edit(QWEN3_06B, |o| drop(o.insert("head_dim".into(), 7.into()))),
            &["head_dim (7)"],
        );
        check("{\"architectures\": [".into(), &["invalid JSON"]);
        let m = ModelConfig::from_hf_json(d.join("missing.json"))
            .unwrap_err()
            .to_string();
        assert!(
            m.contains("missing.json") && m.contains("cannot read"),
            "{m}"
        );
        let m = ModelConfig::synthetic("qwen9").unwrap_err().to_string();
        assert!(m.contains("qwen9") && m.contains("tiny"), "{m}");
    }

    #[test]
    fn hf_json_round_trips_every_synthetic() {
        for name in SYNTHETIC_NAMES {
            let c = ModelConfig::synthetic(name).unwrap();
            c.check().unwrap();
            let back = ModelConfig::from_hf_value(&c.to_hf_json(), Path::new("x")).unwrap();
            assert_eq!(back, c, "{name}");
        }
    }

    #[test]
    fn weight_bytes_match_anchors() {
        // anchors.json weight_bytes_f16 leave out the final norm vector (hidden * 2 bytes).
        let q06 = ModelConfig::synthetic("qwen3-0.6b").unwrap();
        assert_eq!(q06.weight_bytes(DType::F16), 1_192_097_792 + 2 * 1024);
        let q4 = ModelConfig::synthetic("qwen3-4b").unwrap();
        assert_eq!(q4.weight_bytes(DType::F16), 8_044_931_072 + 2 * 2560);
        assert_eq!(
            q4.weight_bytes(DType::F32),
            2 * q4.weight_bytes(DType::BF16)
        );
        let tiny = ModelConfig::synthetic("tiny").unwrap();
        // embed 256*64 + 2 layers * (2*64 + 64*64 + 2*32*64 + 64*64 + 2*16 + 3*192*64) + 64
        assert_eq!(
            tiny.num_params(),
            256 * 64 + 2 * (128 + 4096 + 4096 + 4096 + 32 + 3 * 192 * 64) + 64
        );
        assert_eq!(
            q06.kv_cache_bytes(4096, DType::F16),
            2 * 28 * 1024 * 4096 * 2
        );
    }
}
