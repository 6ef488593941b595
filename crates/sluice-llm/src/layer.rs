//! The forward pass described once: which tensors a model has (their Hugging Face names
//! live here and nowhere else) and the ordered operations of a step. The GPU lowers this
//! description to decode (one token), prefill (a chunk of tokens) and — later — batched
//! decode (`crate::gpu::lower`); the CPU reference (`crate::reference`) is a separate,
//! simple oracle that only shares the tensor names.

use crate::config::ModelConfig;

/// A per-layer tensor role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayerTensor {
    /// RMSNorm weight before attention, `[hidden]`.
    AttnNorm,
    /// Query projection, `[heads * head_dim, hidden]`.
    Q,
    /// Key projection, `[kv_heads * head_dim, hidden]`.
    K,
    /// Value projection, `[kv_heads * head_dim, hidden]`.
    V,
    /// Query bias (Qwen2), `[heads * head_dim]`.
    QBias,
    /// Key bias (Qwen2), `[kv_heads * head_dim]`.
    KBias,
    /// Value bias (Qwen2), `[kv_heads * head_dim]`.
    VBias,
    /// Attention output projection, `[hidden, heads * head_dim]`.
    O,
    /// Per-head RMSNorm weight of q (Qwen3), `[head_dim]`.
    QNorm,
    /// Per-head RMSNorm weight of k (Qwen3), `[head_dim]`.
    KNorm,
    /// RMSNorm weight before the MLP, `[hidden]`.
    MlpNorm,
    /// MLP gate projection, `[intermediate, hidden]`.
    Gate,
    /// MLP up projection, `[intermediate, hidden]`.
    Up,
    /// MLP down projection, `[hidden, intermediate]`.
    Down,
}

impl LayerTensor {
    /// Every role, in checkpoint order.
    pub const ALL: [LayerTensor; 14] = [
        LayerTensor::AttnNorm,
        LayerTensor::Q,
        LayerTensor::K,
        LayerTensor::V,
        LayerTensor::QBias,
        LayerTensor::KBias,
        LayerTensor::VBias,
        LayerTensor::O,
        LayerTensor::QNorm,
        LayerTensor::KNorm,
        LayerTensor::MlpNorm,
        LayerTensor::Gate,
        LayerTensor::Up,
        LayerTensor::Down,
    ];

    /// The name's suffix after `model.layers.N.`.
    pub const fn hf_part(self) -> &'static str {
        match self {
            LayerTensor::AttnNorm => "input_layernorm.weight",
            LayerTensor::Q => "self_attn.q_proj.weight",
            LayerTensor::K => "self_attn.k_proj.weight",
            LayerTensor::V => "self_attn.v_proj.weight",
            LayerTensor::QBias => "self_attn.q_proj.bias",
            LayerTensor::KBias => "self_attn.k_proj.bias",
            LayerTensor::VBias => "self_attn.v_proj.bias",
            LayerTensor::O => "self_attn.o_proj.weight",
            LayerTensor::QNorm => "self_attn.q_norm.weight",
            LayerTensor::KNorm => "self_attn.k_norm.weight",
            LayerTensor::MlpNorm => "post_attention_layernorm.weight",
            LayerTensor::Gate => "mlp.gate_proj.weight",
            LayerTensor::Up => "mlp.up_proj.weight",
            LayerTensor::Down => "mlp.down_proj.weight",
        }
    }

    /// The Hugging Face name of this tensor in `layer`.
    pub fn hf_name(self, layer: usize) -> String {
        format!("model.layers.{layer}.{}", self.hf_part())
    }

    /// Whether a model with `cfg` has this tensor.
    pub fn present(self, cfg: &ModelConfig) -> bool {
        match self {
            LayerTensor::QNorm | LayerTensor::KNorm => cfg.arch.has_qk_norm(),
            LayerTensor::QBias | LayerTensor::KBias | LayerTensor::VBias => cfg.arch.has_qkv_bias(),
            _ => true,
        }
    }

    /// Shape, outermost first (`[out, in]` for projections).
    pub fn shape(self, cfg: &ModelConfig) -> Vec<usize> {
        let (h, q, kv, i) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim(), cfg.intermediate);
        match self {
            LayerTensor::AttnNorm | LayerTensor::MlpNorm => vec![h],
            LayerTensor::Q => vec![q, h],
            LayerTensor::K | LayerTensor::V => vec![kv, h],
            LayerTensor::QBias => vec![q],
            LayerTensor::KBias | LayerTensor::VBias => vec![kv],
            LayerTensor::O => vec![h, q],
            LayerTensor::QNorm | LayerTensor::KNorm => vec![cfg.head_dim],
            LayerTensor::Gate | LayerTensor::Up => vec![i, h],
            LayerTensor::Down => vec![h, i],
        }
    }
}

/// A tensor outside the layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModelTensor {
    /// Token embedding, `[vocab, hidden]`.
    Embed,
    /// Final RMSNorm weight, `[hidden]`.
    FinalNorm,
    /// LM head, `[vocab, hidden]`; absent when embeddings are tied.
    LmHead,
}

impl ModelTensor {
    /// The Hugging Face name.
    pub const fn hf_name(self) -> &'static str {
        match self {
            ModelTensor::Embed => "model.embed_tokens.weight",
            ModelTensor::FinalNorm => "model.norm.weight",
            ModelTensor::LmHead => "lm_head.weight",
        }
    }

    /// Shape, outermost first.
    pub fn shape(self, cfg: &ModelConfig) -> Vec<usize> {
        match self {
            ModelTensor::Embed | ModelTensor::LmHead => vec![cfg.vocab, cfg.hidden],
            ModelTensor::FinalNorm => vec![cfg.hidden],
        }
    }
}

/// An activation of the step. A lowering maps each to a buffer with a per-token stride.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// The residual stream, `[hidden]` per token.
    X,
    /// The q | k | v projections, laid out as the stacked matrix's rows.
    Qkv,
    /// Attention output, `[heads * head_dim]` per token.
    Attn,
    /// MLP hidden state `silu(gate) * up`, `[intermediate]` per token.
    H,
    /// Logits, `[vocab]` (last token only).
    Logits,
}

/// A weight matrix used by a linear op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weight {
    /// q, k and v of a layer, one output (rows of q, then k, then v).
    Qkv(usize),
    /// A single projection of a layer (O, Gate, Up or Down).
    Layer(usize, LayerTensor),
    /// The LM head (the token embedding when tied).
    Head,
}

impl Weight {
    /// The decoder layer the weight belongs to (`None`: the LM head).
    pub fn layer(self) -> Option<usize> {
        match self {
            Weight::Qkv(i) | Weight::Layer(i, _) => Some(i),
            Weight::Head => None,
        }
    }
}

/// A norm weight folded into a linear op: `y = W · (rmsnorm(x) * w)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    /// A layer's RMSNorm weight (AttnNorm or MlpNorm).
    Layer(usize, LayerTensor),
    /// The final norm.
    Final,
}

/// `output (=|+=) W · input'`, `input' = rmsnorm(input) * norm` when `norm` is set; with
/// `up`, `output = silu(W · input') * (up · input')` (the gated MLP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linear {
    /// The matrix (the gate for gated ops).
    pub weight: Weight,
    /// The up projection of a gated op.
    pub up: Option<Weight>,
    /// Folded input norm.
    pub norm: Option<Norm>,
    /// Input activation.
    pub input: Act,
    /// Output activation.
    pub output: Act,
    /// Add into the output (residual) instead of overwriting it.
    pub accumulate: bool,
    /// Profile label ("attn.qkv").
    pub label: &'static str,
}

/// One operation of the step, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `x = embed[token]` for every token of the step.
    Embed,
    /// A (possibly normed, gated, accumulating) matrix product.
    Linear(Linear),
    /// q/k/v biases and q/k RMSNorm (when the model has them), rotary embedding (scaled
    /// when the model's RoPE is), K/V appended to the layer's cache, then causal attention
    /// of every query over the cache: `attn`.
    Attention(usize),
    /// Logits of the step's last token, then the next token (argmax or sample) and the
    /// position advanced by the step's tokens.
    Next,
}

impl Op {
    /// The decoder layer the op belongs to (`None`: embedding, LM head, next token).
    pub fn layer(&self) -> Option<usize> {
        match self {
            Op::Linear(l) => l.weight.layer(),
            Op::Attention(i) => Some(*i),
            Op::Embed | Op::Next => None,
        }
    }
}

/// The ops of one decoder layer.
pub fn layer_ops(layer: usize) -> [Op; 5] {
    use LayerTensor as T;
    [
        Op::Linear(Linear {
            weight: Weight::Qkv(layer),
            up: None,
            norm: Some(Norm::Layer(layer, T::AttnNorm)),
            input: Act::X,
            output: Act::Qkv,
            accumulate: false,
            label: "attn.qkv",
        }),
        Op::Attention(layer),
        Op::Linear(Linear {
            weight: Weight::Layer(layer, T::O),
            up: None,
            norm: None,
            input: Act::Attn,
            output: Act::X,
            accumulate: true,
            label: "attn.o",
        }),
        Op::Linear(Linear {
            weight: Weight::Layer(layer, T::Gate),
            up: Some(Weight::Layer(layer, T::Up)),
            norm: Some(Norm::Layer(layer, T::MlpNorm)),
            input: Act::X,
            output: Act::H,
            accumulate: false,
            label: "mlp.gate_up",
        }),
        Op::Linear(Linear {
            weight: Weight::Layer(layer, T::Down),
            up: None,
            norm: None,
            input: Act::H,
            output: Act::X,
            accumulate: true,
            label: "mlp.down",
        }),
    ]
}

/// The LM head: `logits = head · (rmsnorm(x) * final_norm)` (last token).
pub const LM_HEAD: Linear = Linear {
    weight: Weight::Head,
    up: None,
    norm: Some(Norm::Final),
    input: Act::X,
    output: Act::Logits,
    accumulate: false,
    label: "lm_head",
};

/// The whole step for a model with `layers` layers: embed, the layers, the LM head and
/// the choice of the next token.
pub fn forward(layers: usize) -> Vec<Op> {
    let mut ops = vec![Op::Embed];
    for l in 0..layers {
        ops.extend(layer_ops(l));
    }
    ops.push(Op::Linear(LM_HEAD));
    ops.push(Op::Next);
    ops
}

/// Every tensor a model with `cfg` stores: (HF name, shape), in checkpoint order.
pub fn tensors(cfg: &ModelConfig) -> Vec<(String, Vec<usize>)> {
    let mut v = vec![(
        ModelTensor::Embed.hf_name().to_string(),
        ModelTensor::Embed.shape(cfg),
    )];
    for l in 0..cfg.layers {
        for t in LayerTensor::ALL {
            if t.present(cfg) {
                v.push((t.hf_name(l), t.shape(cfg)));
            }
        }
    }
    v.push((
        ModelTensor::FinalNorm.hf_name().into(),
        ModelTensor::FinalNorm.shape(cfg),
    ));
    if !cfg.tied_embeddings {
        v.push((
            ModelTensor::LmHead.hf_name().into(),
            ModelTensor::LmHead.shape(cfg),
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_has_five_ops_per_layer_plus_embed_head_and_next() {
        let ops = forward(3);
        assert_eq!(ops.len(), 1 + 3 * 5 + 2);
        assert_eq!(ops[0], Op::Embed);
        assert_eq!(ops[2], Op::Attention(0));
        assert_eq!(*ops.last().unwrap(), Op::Next);
    }

    #[test]
    fn tensor_list_follows_the_config() {
        let qwen = ModelConfig::synthetic("tiny").unwrap();
        let llama = ModelConfig::synthetic("tiny-llama").unwrap();
        let has = |c: &ModelConfig, n: &str| tensors(c).iter().any(|(t, _)| t == n);
        assert!(has(&qwen, "model.layers.0.self_attn.q_norm.weight"));
        assert!(!has(&llama, "model.layers.0.self_attn.q_norm.weight"));
        let per_layer = if qwen.arch.has_qk_norm() { 11 } else { 9 };
        let extra = if qwen.tied_embeddings { 2 } else { 3 };
        assert_eq!(tensors(&qwen).len(), qwen.layers * per_layer + extra);
        let qwen2 = ModelConfig::synthetic("tiny-qwen2").unwrap();
        assert!(has(&qwen2, "model.layers.1.self_attn.k_proj.bias"));
        assert!(!has(&qwen2, "model.layers.0.self_attn.q_norm.weight"));
        assert!(!has(&qwen, "model.layers.0.self_attn.q_proj.bias"));
        assert_eq!(tensors(&qwen2).len(), qwen2.layers * 12 + 2);
    }
}
