//! `--dtype` for quantize-on-load: which weight dtype each matrix gets.
//!
//! `f16 | bf16 | f32` keep every matrix in that float type; `q8_0 | q4_0 | q4_1 | q5_0 |
//! q5_1 | q6_k` quantize every matrix to that format; `q4_k_m | q5_k_m` follow
//! llama.cpp's mixture (llama-quant.cpp, `llama_tensor_get_type`): Q4_K (Q5_K) for most
//! matrices, Q6_K for the output matrix (the LM head, or the embedding when it is tied)
//! and for `v_proj` / `down_proj` of the layers `use_more_bits` picks (the first and last
//! eighth, and every third layer between). With any block format the output matrix gets
//! Q6_K unless the request is Q8_0, as in llama.cpp.
//!
//! A row length the format's block does not divide falls back as llama.cpp does: Q4_K ->
//! Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; and to F16 when 32 does not divide it either.
//! Norm weights (1-D) are never quantized: callers keep them F32.
//!
//! `--tensor-type ROLE=FORMAT` (llama-quantize's option, by llama.cpp's tensor names:
//! `attn_v=q4_k`, `ffn_down=q8_0`, `output=f16`) gives every matrix of that role the format
//! instead, before the same fallbacks.

use sluice_kernels::WeightDtype;

use crate::error::{LlmError, Result};
use crate::weights::{EMBED, LM_HEAD};

/// What `--dtype` asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantKind {
    /// Every matrix in this float dtype.
    Float(WeightDtype),
    /// Every matrix in this block format (output matrix: Q6_K unless Q8_0).
    Uniform(WeightDtype),
    /// llama.cpp's Q4_K_M mixture.
    Q4KM,
    /// llama.cpp's Q5_K_M mixture.
    Q5KM,
}

/// A parsed `--dtype` plus what the mixture needs to know about the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantRequest {
    /// The dtype or mixture.
    pub kind: QuantKind,
    /// The LM head reuses the embedding: the embedding gets the output matrix's type.
    pub tied_embeddings: bool,
    /// Formats asked for per kind of matrix (`--tensor-type`), over the dtype or mixture.
    pub tensor_types: TensorTypes,
}

/// A kind of weight matrix, by llama.cpp's GGUF tensor names (`blk.N.attn_v.weight` ->
/// `attn_v`), for `--tensor-type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// q_proj.
    AttnQ,
    /// k_proj.
    AttnK,
    /// v_proj.
    AttnV,
    /// o_proj.
    AttnOutput,
    /// gate_proj.
    FfnGate,
    /// up_proj.
    FfnUp,
    /// down_proj.
    FfnDown,
    /// The embedding table (a tied one is the output matrix: `output`).
    TokenEmbd,
    /// The LM head.
    Output,
}

/// Every role with its GGUF name and its Hugging Face name's ending.
const ROLES: [(Role, &str, &str); 9] = [
    (Role::AttnQ, "attn_q", "self_attn.q_proj.weight"),
    (Role::AttnK, "attn_k", "self_attn.k_proj.weight"),
    (Role::AttnV, "attn_v", "self_attn.v_proj.weight"),
    (Role::AttnOutput, "attn_output", "self_attn.o_proj.weight"),
    (Role::FfnGate, "ffn_gate", "mlp.gate_proj.weight"),
    (Role::FfnUp, "ffn_up", "mlp.up_proj.weight"),
    (Role::FfnDown, "ffn_down", "mlp.down_proj.weight"),
    (Role::TokenEmbd, "token_embd", EMBED),
    (Role::Output, "output", LM_HEAD),
];

/// The names `--tensor-type` accepts before `=`.
pub const ROLE_NAMES: &str =
    "attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down|token_embd|output";

impl Role {
    /// The role of the matrix `hf_name` (`tied`: the embedding is the output matrix).
    pub fn of(hf_name: &str, tied: bool) -> Option<Role> {
        if tied && hf_name == EMBED {
            return Some(Role::Output);
        }
        ROLES
            .iter()
            .find(|(_, _, hf)| hf_name.ends_with(hf))
            .map(|&(r, _, _)| r)
    }

    fn index(self) -> usize {
        ROLES.iter().position(|&(r, _, _)| r == self).unwrap_or(0)
    }
}

/// Formats asked for per [`Role`] (`--tensor-type`); none by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TensorTypes([Option<WeightDtype>; ROLES.len()]);

impl TensorTypes {
    /// The format asked for `role`.
    pub fn get(&self, role: Role) -> Option<WeightDtype> {
        self.0[role.index()]
    }

    /// Asks for `dtype` for every matrix of `role` (a later call for the same role wins).
    pub fn set(&mut self, role: Role, dtype: WeightDtype) {
        self.0[role.index()] = Some(dtype);
    }

    /// Whether no role has a format.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }
}

/// Parses a `--tensor-type` value, `ROLE=FORMAT` (`attn_v=q4_k`; case-insensitive): a role
/// of [`ROLE_NAMES`] and a format of [`DTYPE_NAMES`] but the mixtures.
pub fn parse_tensor_type(s: &str) -> Result<(Role, WeightDtype)> {
    let bad = |why: String| LlmError::InvalidArgument(format!("--tensor-type {s:?}: {why}"));
    let (role, format) = s
        .split_once('=')
        .ok_or_else(|| bad("expected ROLE=FORMAT, e.g. attn_v=q4_k".into()))?;
    let role = role.trim().to_ascii_lowercase();
    let role = ROLES
        .iter()
        .find(|(_, n, _)| *n == role)
        .map(|&(r, _, _)| r)
        .ok_or_else(|| bad(format!("{role:?} is not one of {ROLE_NAMES}")))?;
    let dtype = match parse(format.trim())?.kind {
        QuantKind::Float(d) | QuantKind::Uniform(d) => d,
        QuantKind::Q4KM | QuantKind::Q5KM => {
            return Err(bad("a mixture is not one format".into()));
        }
    };
    Ok((role, dtype))
}

/// The names [`parse`] accepts.
pub const DTYPE_NAMES: &str = "f16|bf16|f32|q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k|q4_k_m|q5_k_m";

/// Parses a `--dtype` value (case-insensitive); `tied_embeddings` starts false.
pub fn parse(s: &str) -> Result<QuantRequest> {
    let l = s.to_ascii_lowercase();
    let kind = match l.as_str() {
        "q4_k_m" => QuantKind::Q4KM,
        "q5_k_m" => QuantKind::Q5KM,
        _ => match WeightDtype::from_name(&l) {
            Some(d) if !d.is_quantized() => QuantKind::Float(d),
            Some(
                d @ (WeightDtype::Q8_0
                | WeightDtype::Q4_0
                | WeightDtype::Q4_1
                | WeightDtype::Q5_0
                | WeightDtype::Q5_1
                | WeightDtype::Q4K
                | WeightDtype::Q5K
                | WeightDtype::Q6K),
            ) => QuantKind::Uniform(d),
            _ => {
                return Err(LlmError::InvalidArgument(format!(
                    "--dtype {s:?} is not one of {DTYPE_NAMES}"
                )))
            }
        },
    };
    Ok(QuantRequest {
        kind,
        tied_embeddings: false,
        tensor_types: TensorTypes::default(),
    })
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers, and every third
/// layer between.
pub fn use_more_bits(layer: usize, layers: usize) -> bool {
    let first = layers / 8;
    layer < first || layer >= 7 * layers / 8 || (layer - first) % 3 == 2
}

/// The dtype the matrix `hf_name` (`[rows, cols]`, in layer `layer` of `layers`; any
/// layer for non-layer tensors) gets under `req`.
pub fn choose(
    req: &QuantRequest,
    hf_name: &str,
    layer: usize,
    layers: usize,
    rows: usize,
    cols: usize,
) -> WeightDtype {
    let _ = rows;
    let asked = Role::of(hf_name, req.tied_embeddings).and_then(|r| req.tensor_types.get(r));
    let base = match req.kind {
        QuantKind::Float(d) if asked.is_none() => return d,
        QuantKind::Float(d) | QuantKind::Uniform(d) => d,
        QuantKind::Q4KM => WeightDtype::Q4K,
        QuantKind::Q5KM => WeightDtype::Q5K,
    };
    let mixture = matches!(req.kind, QuantKind::Q4KM | QuantKind::Q5KM);
    let is_output = hf_name == LM_HEAD || (req.tied_embeddings && hf_name == EMBED);
    let mut t = base;
    if is_output && base.is_quantized() {
        if !cols.is_multiple_of(base.block_elems()) {
            t = WeightDtype::Q8_0;
        } else if base != WeightDtype::Q8_0 {
            t = WeightDtype::Q6K;
        }
    } else if mixture
        && (hf_name.ends_with("self_attn.v_proj.weight")
            || hf_name.ends_with("mlp.down_proj.weight"))
        && use_more_bits(layer, layers)
    {
        t = WeightDtype::Q6K;
    }
    if let Some(d) = asked {
        t = d;
    }
    if !cols.is_multiple_of(t.block_elems()) {
        t = match t {
            WeightDtype::Q4K => WeightDtype::Q5_0,
            WeightDtype::Q5K => WeightDtype::Q5_1,
            WeightDtype::Q6K => WeightDtype::Q8_0,
            other => other,
        };
    }
    if !cols.is_multiple_of(t.block_elems()) {
        t = WeightDtype::F16;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelConfig;
    use crate::weights::{expected_tensors, layer_tensor};
    use WeightDtype as W;

    #[test]
    fn parse_names() {
        for (s, k) in [
            ("f16", QuantKind::Float(W::F16)),
            ("BF16", QuantKind::Float(W::Bf16)),
            ("f32", QuantKind::Float(W::F32)),
            ("q8_0", QuantKind::Uniform(W::Q8_0)),
            ("q4_0", QuantKind::Uniform(W::Q4_0)),
            ("q4_1", QuantKind::Uniform(W::Q4_1)),
            ("q5_0", QuantKind::Uniform(W::Q5_0)),
            ("q5_1", QuantKind::Uniform(W::Q5_1)),
            ("q6_k", QuantKind::Uniform(W::Q6K)),
            ("q4_k", QuantKind::Uniform(W::Q4K)),
            ("q5_k", QuantKind::Uniform(W::Q5K)),
            ("q4_k_m", QuantKind::Q4KM),
            ("Q5_K_M", QuantKind::Q5KM),
        ] {
            assert_eq!(parse(s).unwrap().kind, k, "{s}");
        }
        for bad in ["q3_k", "q3_k_m", "int8", ""] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains(DTYPE_NAMES), "{e}");
        }
    }

    #[test]
    fn tensor_types_replace_the_mixture_per_role() {
        let mut req = parse("q4_k_m").unwrap();
        for t in ["attn_v=q4_k", "FFN_DOWN=Q8_0", "output=f16", "attn_q=q6_k"] {
            let (role, dt) = parse_tensor_type(t).unwrap();
            req.tensor_types.set(role, dt);
        }
        let c = |name: &str, layer, cols| choose(&req, name, layer, 32, 4096, cols);
        let v0 = layer_tensor(0, "self_attn.v_proj.weight");
        // Layer 0's v and down would be Q6_K in the mixture.
        assert_eq!(c(&v0, 0, 4096), W::Q4K);
        assert_eq!(
            c(&layer_tensor(0, "mlp.down_proj.weight"), 0, 4096),
            W::Q8_0
        );
        assert_eq!(
            c(&layer_tensor(0, "self_attn.q_proj.weight"), 0, 4096),
            W::Q6K
        );
        assert_eq!(
            c(&layer_tensor(0, "self_attn.k_proj.weight"), 0, 4096),
            W::Q4K
        );
        assert_eq!(c(LM_HEAD, 0, 4096), W::F16);
        // The usual fallbacks after: a row of 96 fits no K-quant block.
        assert_eq!(c(&v0, 0, 96), W::Q5_0);
        assert_eq!(
            c(&layer_tensor(0, "self_attn.q_proj.weight"), 0, 96),
            W::Q8_0
        );
        // A tied embedding is the output matrix.
        let tied = QuantRequest {
            tied_embeddings: true,
            ..req
        };
        assert_eq!(choose(&tied, EMBED, 0, 32, 1000, 4096), W::F16);
        // Over a float dtype only the roles asked for are quantized.
        let mut f = parse("f16").unwrap();
        f.tensor_types.set(Role::AttnV, W::Q8_0);
        assert_eq!(choose(&f, &v0, 0, 32, 8, 512), W::Q8_0);
        assert_eq!(choose(&f, LM_HEAD, 0, 32, 8, 512), W::F16);
        assert_eq!(
            choose(&f, &layer_tensor(3, "mlp.up_proj.weight"), 3, 32, 8, 512),
            W::F16
        );
        // Bad values name what is wrong.
        for (bad, want) in [
            ("attn_v", "ROLE=FORMAT"),
            ("attn_x=q4_k", ROLE_NAMES),
            ("attn_v=q3_k", DTYPE_NAMES),
            ("attn_v=q4_k_m", "mixture"),
        ] {
            let e = parse_tensor_type(bad).unwrap_err().to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn q4_k_m_mixture_like_llama_cpp() {
        // 32 layers: use_more_bits picks 0..4, 28..32 and 4 + 3k + 2.
        let more: Vec<usize> = (0..32).filter(|&l| use_more_bits(l, 32)).collect();
        assert_eq!(
            more,
            vec![0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
        );
        let req = parse("q4_k_m").unwrap();
        let c = |name: &str, layer| choose(&req, name, layer, 32, 4096, 4096);
        assert_eq!(c(&layer_tensor(0, "self_attn.v_proj.weight"), 0), W::Q6K);
        assert_eq!(c(&layer_tensor(4, "self_attn.v_proj.weight"), 4), W::Q4K);
        assert_eq!(c(&layer_tensor(6, "mlp.down_proj.weight"), 6), W::Q6K);
        assert_eq!(c(&layer_tensor(7, "mlp.down_proj.weight"), 7), W::Q4K);
        assert_eq!(c(&layer_tensor(0, "self_attn.q_proj.weight"), 0), W::Q4K);
        assert_eq!(c(&layer_tensor(31, "mlp.gate_proj.weight"), 31), W::Q4K);
        assert_eq!(c(LM_HEAD, 0), W::Q6K);
        assert_eq!(c(EMBED, 0), W::Q4K);
        let tied = QuantRequest {
            tied_embeddings: true,
            ..req
        };
        assert_eq!(choose(&tied, EMBED, 0, 32, 1000, 4096), W::Q6K);
        let q5 = parse("q5_k_m").unwrap();
        assert_eq!(
            choose(&q5, "model.layers.1.mlp.up_proj.weight", 1, 32, 8, 512),
            W::Q5K
        );
        assert_eq!(
            choose(&q5, "model.layers.1.mlp.down_proj.weight", 1, 32, 8, 512),
            W::Q6K
        );
        // Uniform formats: the output matrix gets Q6_K unless Q8_0.
        assert_eq!(
            choose(&parse("q4_0").unwrap(), LM_HEAD, 0, 32, 8, 512),
            W::Q6K
        );
        assert_eq!(
            choose(&parse("q8_0").unwrap(), LM_HEAD, 0, 32, 8, 512),
            W::Q8_0
        );
        assert_eq!(
            choose(&parse("q4_1").unwrap(), EMBED, 0, 32, 8, 512),
            W::Q4_1
        );
    }

    #[test]
    fn fallbacks_when_the_block_does_not_divide_the_row() {
        let c = |s: &str, name: &str, cols| choose(&parse(s).unwrap(), name, 0, 30, 8, cols);
        let q = "model.layers.3.self_attn.q_proj.weight";
        assert_eq!(c("q4_k_m", q, 576), W::Q5_0);
        assert_eq!(c("q5_k_m", q, 576), W::Q5_1);
        assert_eq!(c("q6_k", q, 576), W::Q8_0);
        assert_eq!(
            c("q4_k_m", "model.layers.0.mlp.down_proj.weight", 1536),
            W::Q6K
        );
        assert_eq!(c("q4_k_m", LM_HEAD, 576), W::Q8_0);
        assert_eq!(c("q4_0", q, 100), W::F16);
        assert_eq!(c("q4_k_m", q, 100), W::F16);
        assert_eq!(c("bf16", q, 100), W::Bf16);
        // Every --dtype yields a usable dtype for every matrix of the synthetic models.
        for name in crate::config::SYNTHETIC_NAMES {
            let cfg = ModelConfig::synthetic(name).unwrap();
            for s in DTYPE_NAMES.split('|') {
                let mut req = parse(s).unwrap();
                req.tied_embeddings = cfg.tied_embeddings;
                for spec in expected_tensors(&cfg) {
                    if spec.shape.len() != 2 {
                        continue;
                    }
                    let layer = spec
                        .name
                        .strip_prefix("model.layers.")
                        .and_then(|r| r.split('.').next())
                        .map_or(0, |n| n.parse().unwrap());
                    let (rows, cols) = (spec.shape[0], spec.shape[1]);
                    let dt = choose(&req, &spec.name, layer, cfg.layers, rows, cols);
                    assert!(
                        dt.row_bytes(cols).is_some(),
                        "{name} {s} {}: {} does not fit {cols} columns",
                        spec.name,
                        dt.name()
                    );
                }
            }
        }
    }
}
