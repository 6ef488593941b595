//! The CPU f32 reference forward of Qwen3/Qwen2/Llama decode: simple and direct, the oracle the
//! GPU path and its kernels are compared with. Dot products and norms accumulate in f64;
//! rotary angles are computed in f64.

use std::collections::HashMap;

use crate::config::{ModelConfig, RopeScaling};
use crate::error::{LlmError, Result};
use crate::layer::LayerTensor as T;
use crate::safetensors::{DType, ModelFiles};
use crate::weights::{
    expected_tensors, layer_tensor, load_f32, synthetic_f32, EMBED, FINAL_NORM, LM_HEAD,
};

/// RMSNorm: `x * 1/sqrt(mean(x²) + eps) * w`, element-wise; `w.len() == x.len()`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    assert_eq!(x.len(), w.len(), "rms_norm: x and weight lengths differ");
    let ms = x.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / x.len().max(1) as f64;
    let inv = 1.0 / (ms + eps as f64).sqrt();
    x.iter()
        .zip(w)
        .map(|(&v, &g)| (v as f64 * inv) as f32 * g)
        .collect()
}

/// Dot product accumulated in f64.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f64; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..4 {
            acc[l] += x[l] as f64 * y[l] as f64;
        }
    }
    let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (x, y) in ra.iter().zip(rb) {
        s += *x as f64 * *y as f64;
    }
    s as f32
}

/// `y = W x` for a row-major `W` of shape `[w.len() / x.len(), x.len()]`; large products use all cores.
pub fn matvec(w: &[f32], x: &[f32]) -> Vec<f32> {
    let cols = x.len();
    assert!(
        cols > 0 && w.len().is_multiple_of(cols),
        "matvec: weight length {} is not a multiple of {cols}",
        w.len()
    );
    let rows = w.len() / cols;
    let mut y = vec![0f32; rows];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads == 1 || w.len() < (1 << 18) {
        for (r, out) in y.iter_mut().enumerate() {
            *out = dot(&w[r * cols..(r + 1) * cols], x);
        }
        return y;
    }
    let per = rows.div_ceil(threads);
    std::thread::scope(|s| {
        for (t, ys) in y.chunks_mut(per).enumerate() {
            s.spawn(move || {
                for (j, out) in ys.iter_mut().enumerate() {
                    let r = t * per + j;
                    *out = dot(&w[r * cols..(r + 1) * cols], x);
                }
            });
        }
    });
    y
}

/// Rotary embedding in HF layout, in place, on every `head_dim`-wide head of `x`: for
/// `i < head_dim/2` the pair `(i, i + head_dim/2)` is rotated by `pos · theta^(-2i/head_dim)`.
pub fn rope_inplace(x: &mut [f32], head_dim: usize, pos: usize, theta: f32) {
    let inv_freq: Vec<f64> = (0..head_dim / 2)
        .map(|i| (theta as f64).powf(-2.0 * i as f64 / head_dim as f64))
        .collect();
    rope_freqs_inplace(x, head_dim, pos, &inv_freq);
}

/// The inverse frequency of every rotation pair of `cfg`, RoPE scaling included, written
/// as Hugging Face's `_compute_llama3_parameters` / `_compute_linear_scaling_rope_parameters`
/// and llama.cpp's `freq_factors` / `freq_scale` do it.
pub fn rope_inv_freq(cfg: &ModelConfig) -> Vec<f64> {
    let d = cfg.head_dim;
    (0..d / 2)
        .map(|i| {
            let f = (cfg.rope_theta as f64).powf(-2.0 * i as f64 / d as f64);
            match &cfg.rope_scaling {
                None => f,
                Some(RopeScaling::Factors(ff)) => f / ff[i] as f64,
                Some(RopeScaling::Linear { factor }) => f / *factor as f64,
                Some(RopeScaling::Llama3 {
                    factor,
                    low_freq_factor,
                    high_freq_factor,
                    original_max_positions,
                }) => {
                    let (factor, low, high) = (
                        *factor as f64,
                        *low_freq_factor as f64,
                        *high_freq_factor as f64,
                    );
                    let old = *original_max_positions as f64;
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    let scaled = if wavelen > old / low { f / factor } else { f };
                    let smooth = (old / wavelen - low) / (high - low);
                    let medium = wavelen >= old / high && wavelen <= old / low;
                    if medium {
                        (1.0 - smooth) * scaled / factor + smooth * scaled
                    } else {
                        scaled
                    }
                }
            }
        })
        .collect()
}

/// Rotary embedding with the given inverse frequency per pair (`head_dim / 2` of them).
pub fn rope_freqs_inplace(x: &mut [f32], head_dim: usize, pos: usize, inv_freq: &[f64]) {
    assert!(
        head_dim.is_multiple_of(2) && x.len().is_multiple_of(head_dim),
        "rope: bad head_dim {head_dim} for length {}",
        x.len()
    );
    let half = head_dim / 2;
    for head in x.chunks_exact_mut(head_dim) {
        for (i, &inv_freq) in inv_freq.iter().enumerate().take(half) {
            let (s, c) = (pos as f64 * inv_freq).sin_cos();
            let (a, b) = (head[i] as f64, head[i + half] as f64);
            head[i] = (a * c - b * s) as f32;
            head[i + half] = (b * c + a * s) as f32;
        }
    }
}

/// SiLU: `x · sigmoid(x)`.
pub fn silu(x: f32) -> f32 {
    (x as f64 / (1.0 + (-x as f64).exp())) as f32
}

/// Softmax in place (max subtracted first).
pub fn softmax_inplace(x: &mut [f32]) {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f64;
    for v in x.iter_mut() {
        let e = ((*v - m) as f64).exp();
        *v = e as f32;
        sum += e;
    }
    for v in x.iter_mut() {
        *v = (*v as f64 / sum) as f32;
    }
}

/// Decode attention of one query over `seq_len` cached positions with GQA: query head `h`
/// uses kv head `h / (heads / kv_heads)`; caches are `[seq_len][kv_heads * head_dim]`;
/// scores are `q·k / sqrt(head_dim)`. Returns `[heads * head_dim]`.
pub fn attention(
    q: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
    seq_len: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
) -> Vec<f32> {
    let kv_dim = kv_heads * head_dim;
    assert!(
        q.len() == heads * head_dim && heads.is_multiple_of(kv_heads),
        "attention: bad head counts"
    );
    assert!(
        k_cache.len() >= seq_len * kv_dim && v_cache.len() >= seq_len * kv_dim,
        "attention: cache too short"
    );
    let group = heads / kv_heads;
    let scale = 1.0 / (head_dim as f64).sqrt();
    let mut out = vec![0f32; heads * head_dim];
    let mut scores = vec![0f32; seq_len];
    for h in 0..heads {
        let kvh = h / group;
        let qh = &q[h * head_dim..(h + 1) * head_dim];
        for (t, s) in scores.iter_mut().enumerate() {
            let k = &k_cache[t * kv_dim + kvh * head_dim..][..head_dim];
            *s = (dot(qh, k) as f64 * scale) as f32;
        }
        softmax_inplace(&mut scores);
        let mut acc = vec![0f64; head_dim];
        for (t, &p) in scores.iter().enumerate() {
            let v = &v_cache[t * kv_dim + kvh * head_dim..][..head_dim];
            for (a, &vv) in acc.iter_mut().zip(v) {
                *a += p as f64 * vv as f64;
            }
        }
        for (o, a) in out[h * head_dim..(h + 1) * head_dim].iter_mut().zip(acc) {
            *o = a as f32;
        }
    }
    out
}

struct Layer {
    attn_norm: Vec<f32>,
    wq: Vec<f32>,
    wk: Vec<f32>,
    wv: Vec<f32>,
    wo: Vec<f32>,
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    /// q, k and v biases (Qwen2).
    bias: Option<[Vec<f32>; 3]>,
    mlp_norm: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    down: Vec<f32>,
}

/// A model on the CPU in f32 with its own KV cache and position: feed one token, get logits.
pub struct CpuModel {
    cfg: ModelConfig,
    embed: Vec<f32>,
    layers: Vec<Layer>,
    final_norm: Vec<f32>,
    lm_head: Option<Vec<f32>>,
    /// Inverse frequency per rotation pair ([`rope_inv_freq`]).
    inv_freq: Vec<f64>,
    k_cache: Vec<Vec<f32>>,
    v_cache: Vec<Vec<f32>>,
    pos: usize,
}

impl std::fmt::Debug for CpuModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuModel")
            .field("cfg", &self.cfg)
            .field("pos", &self.pos)
            .finish()
    }
}

impl CpuModel {
    /// Builds the model from f32 tensors by HF name (as [`crate::weights::expected_tensors`]
    /// lists them); a missing tensor or a wrong element count is an error naming it.
    pub fn new(cfg: &ModelConfig, mut weights: HashMap<String, Vec<f32>>) -> Result<Self> {
        cfg.check()
            .map_err(|m| LlmError::InvalidArgument(format!("reference model config: {m}")))?;
        for spec in expected_tensors(cfg) {
            match weights.get(&spec.name) {
                None => {
                    return Err(LlmError::InvalidArgument(format!(
                        "reference model: tensor {:?} is missing",
                        spec.name
                    )))
                }
                Some(v) if v.len() != spec.numel() => {
                    return Err(LlmError::InvalidArgument(format!(
                        "reference model: tensor {:?} has {} elements, expected {} (shape {:?})",
                        spec.name,
                        v.len(),
                        spec.numel(),
                        spec.shape
                    )))
                }
                Some(_) => {}
            }
        }
        let mut take = |name: &str| weights.remove(name).unwrap_or_default();
        let layers = (0..cfg.layers)
            .map(|l| {
                let mut t = |part: &str| take(&layer_tensor(l, part));
                Layer {
                    attn_norm: t(T::AttnNorm.hf_part()),
                    wq: t(T::Q.hf_part()),
                    wk: t(T::K.hf_part()),
                    wv: t(T::V.hf_part()),
                    wo: t(T::O.hf_part()),
                    q_norm: cfg.arch.has_qk_norm().then(|| t(T::QNorm.hf_part())),
                    k_norm: cfg.arch.has_qk_norm().then(|| t(T::KNorm.hf_part())),
                    bias: cfg
                        .arch
                        .has_qkv_bias()
                        .then(|| [T::QBias, T::KBias, T::VBias].map(|b| t(b.hf_part()))),
                    mlp_norm: t(T::MlpNorm.hf_part()),
                    gate: t(T::Gate.hf_part()),
                    up: t(T::Up.hf_part()),
                    down: t(T::Down.hf_part()),
                }
            })
            .collect();
        Ok(CpuModel {
            cfg: cfg.clone(),
            embed: take(EMBED),
            layers,
            final_norm: take(FINAL_NORM),
            lm_head: (!cfg.tied_embeddings).then(|| take(LM_HEAD)),
            inv_freq: rope_inv_freq(cfg),
            k_cache: vec![Vec::new(); cfg.layers],
            v_cache: vec![Vec::new(); cfg.layers],
            pos: 0,
        })
    }

    /// Loads, checks and converts the weights of a model directory.
    pub fn from_files(files: &ModelFiles) -> Result<Self> {
        Self::new(files.config(), load_f32(files)?)
    }

    /// The synthetic model of `cfg` and `seed`, with weights rounded through `dtype` exactly
    /// as a GPU holding `dtype` weights sees them.
    pub fn synthetic(cfg: &ModelConfig, seed: u64, dtype: DType) -> Result<Self> {
        Self::new(cfg, synthetic_f32(cfg, seed, dtype))
    }

    /// The model's config.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Number of tokens in the KV cache (the position of the next token).
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Empties the KV cache and goes back to position 0.
    pub fn reset(&mut self) {
        self.k_cache
            .iter_mut()
            .chain(self.v_cache.iter_mut())
            .for_each(Vec::clear);
        self.pos = 0;
    }

    /// Runs one token at the current position, appends its K/V, and returns `vocab` logits.
    pub fn forward(&mut self, token: u32) -> Result<Vec<f32>> {
        let cfg = &self.cfg;
        if token as usize >= cfg.vocab {
            return Err(LlmError::InvalidArgument(format!(
                "token {token} is out of range for vocab {}",
                cfg.vocab
            )));
        }
        if self.pos >= cfg.max_positions {
            return Err(LlmError::InvalidArgument(format!(
                "context is full: position {} reaches max_positions {}",
                self.pos, cfg.max_positions
            )));
        }
        let (h, d, eps, pos) = (cfg.hidden, cfg.head_dim, cfg.rms_eps, self.pos);
        let t = token as usize;
        let mut x = self.embed[t * h..(t + 1) * h].to_vec();
        for (l, layer) in self.layers.iter().enumerate() {
            let xn = rms_norm(&x, &layer.attn_norm, eps);
            let mut q = matvec(&layer.wq, &xn);
            let mut k = matvec(&layer.wk, &xn);
            let mut v = matvec(&layer.wv, &xn);
            if let Some([bq, bk, bv]) = &layer.bias {
                for (y, b) in [(&mut q, bq), (&mut k, bk), (&mut v, bv)] {
                    y.iter_mut().zip(b).for_each(|(y, b)| *y += b);
                }
            }
            if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
                for head in q.chunks_exact_mut(d) {
                    let n = rms_norm(head, qn, eps);
                    head.copy_from_slice(&n);
                }
                for head in k.chunks_exact_mut(d) {
                    let n = rms_norm(head, kn, eps);
                    head.copy_from_slice(&n);
                }
            }
            rope_freqs_inplace(&mut q, d, pos, &self.inv_freq);
            rope_freqs_inplace(&mut k, d, pos, &self.inv_freq);
            self.k_cache[l].extend_from_slice(&k);
            self.v_cache[l].extend_from_slice(&v);
            let att = attention(
                &q,
                &self.k_cache[l],
                &self.v_cache[l],
                pos + 1,
                cfg.heads,
                cfg.kv_heads,
                d,
            );
            for (xi, o) in x.iter_mut().zip(matvec(&layer.wo, &att)) {
                *xi += o;
            }
            let xn = rms_norm(&x, &layer.mlp_norm, eps);
            let g = matvec(&layer.gate, &xn);
            let u = matvec(&layer.up, &xn);
            let a: Vec<f32> = g.iter().zip(&u).map(|(&g, &u)| silu(g) * u).collect();
            for (xi, o) in x.iter_mut().zip(matvec(&layer.down, &a)) {
                *xi += o;
            }
        }
        let xn = rms_norm(&x, &self.final_norm, eps);
        let logits = matvec(self.lm_head.as_ref().unwrap_or(&self.embed), &xn);
        self.pos += 1;
        Ok(logits)
    }

    /// Feeds `prompt`, then greedily generates `n` tokens (each fed back); returns the
    /// generated tokens. Needs a non-empty prompt.
    pub fn generate_greedy(&mut self, prompt: &[u32], n: usize) -> Result<Vec<u32>> {
        if prompt.is_empty() {
            return Err(LlmError::InvalidArgument(
                "generate: the prompt is empty".into(),
            ));
        }
        let mut logits = Vec::new();
        for &t in prompt {
            logits = self.forward(t)?;
        }
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let next = crate::sampler::argmax(&logits)?;
            out.push(next);
            if i + 1 < n {
                logits = self.forward(next)?;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Arch;
    use crate::weights::DEFAULT_SEED;

    fn close(a: &[f32], b: &[f32], tol: f32) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| (x - y).abs() <= tol * (1.0 + y.abs()))
    }

    fn pseudo(seed: u64, n: usize) -> Vec<f32> {
        (0..n as u64)
            .map(|i| crate::sampler::uniform01(seed, i) * 2.0 - 1.0)
            .collect()
    }

    #[test]
    fn rope_at_position_zero_is_identity() {
        let x = pseudo(1, 64);
        let mut y = x.clone();
        rope_inplace(&mut y, 16, 0, 1e6);
        assert_eq!(x, y);
    }

    #[test]
    fn rope_rotates_half_split_pairs() {
        // head_dim 4, theta 100: inv_freq = [1, 0.1]; pairs (0, 2) and (1, 3)
        let mut x = [1.0f32, 2.0, 3.0, 4.0];
        rope_inplace(&mut x, 4, 1, 100.0);
        let (s1, c1) = 1f32.sin_cos();
        let (s2, c2) = 0.1f32.sin_cos();
        let want = [
            1.0 * c1 - 3.0 * s1,
            2.0 * c2 - 4.0 * s2,
            3.0 * c1 + 1.0 * s1,
            4.0 * c2 + 2.0 * s2,
        ];
        assert!(close(&x, &want, 1e-6), "{x:?} vs {want:?}");
    }

    #[test]
    fn rope_scores_depend_only_on_relative_position() {
        let (q, k) = (pseudo(2, 32), pseudo(3, 32));
        let score = |m: usize, n: usize| {
            let (mut a, mut b) = (q.clone(), k.clone());
            rope_inplace(&mut a, 32, m, 10000.0);
            rope_inplace(&mut b, 32, n, 10000.0);
            dot(&a, &b)
        };
        assert!((score(7, 3) - score(107, 103)).abs() < 1e-4);
        assert!(
            (score(7, 3) - score(3, 7)).abs() > 1e-3,
            "not symmetric in general"
        );
        // norm preserved
        let mut a = q.clone();
        rope_inplace(&mut a, 32, 12345, 1e6);
        assert!((dot(&a, &a) - dot(&q, &q)).abs() < 1e-4);
    }

    #[test]
    fn attention_one_position_returns_v_of_the_group() {
        let (heads, kv_heads, d) = (4, 2, 8);
        let q = pseudo(4, heads * d);
        let (k, v) = (pseudo(5, kv_heads * d), pseudo(6, kv_heads * d));
        let o = attention(&q, &k, &v, 1, heads, kv_heads, d);
        for h in 0..heads {
            assert_eq!(&o[h * d..(h + 1) * d], &v[(h / 2) * d..(h / 2 + 1) * d]);
        }
        // two positions: softmax weights by hand for head 3 (kv head 1)
        let (k, v) = (pseudo(7, 2 * kv_heads * d), pseudo(8, 2 * kv_heads * d));
        let o = attention(&q, &k, &v, 2, heads, kv_heads, d);
        let qh = &q[3 * d..4 * d];
        let s: Vec<f64> = (0..2)
            .map(|t| dot(qh, &k[t * 16 + 8..t * 16 + 16]) as f64 / (d as f64).sqrt())
            .collect();
        let p1 = 1.0 / (1.0 + (s[0] - s[1]).exp());
        let want: Vec<f32> = (0..d)
            .map(|i| ((1.0 - p1) * v[8 + i] as f64 + p1 * v[24 + i] as f64) as f32)
            .collect();
        assert!(close(&o[3 * d..], &want, 1e-6));
    }

    fn one_layer(arch: Arch) -> ModelConfig {
        ModelConfig {
            arch,
            hidden: 48,
            intermediate: 80,
            layers: 1,
            heads: 4,
            kv_heads: 2,
            head_dim: 12,
            vocab: 100,
            rope_theta: 10000.0,
            rope_scaling: None,
            rms_eps: 1e-6,
            tied_embeddings: true,
            max_positions: 64,
            bos_token: None,
            eos_token: None,
        }
    }

    #[test]
    fn zero_projections_give_tied_embedding_dot_of_normed_input() {
        for arch in [Arch::Qwen3, Arch::Llama] {
            let cfg = one_layer(arch);
            let mut w = synthetic_f32(&cfg, 11, DType::F32);
            for part in ["self_attn.o_proj.weight", "mlp.down_proj.weight"] {
                w.get_mut(&layer_tensor(0, part)).unwrap().fill(0.0);
            }
            let (e, g) = (w[EMBED].clone(), w[FINAL_NORM].clone());
            let mut m = CpuModel::new(&cfg, w).unwrap();
            for token in [5u32, 99, 0] {
                let logits = m.forward(token).unwrap();
                // independent: logits[j] = sum_i E[j,i] * E[t,i] / rms(E[t]) * g[i]
                let h = cfg.hidden;
                let x = &e[token as usize * h..][..h];
                let rms =
                    (x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / h as f64 + 1e-6).sqrt();
                let want: Vec<f32> = (0..cfg.vocab)
                    .map(|j| {
                        (0..h)
                            .map(|i| e[j * h + i] as f64 * x[i] as f64 / rms * g[i] as f64)
                            .sum::<f64>() as f32
                    })
                    .collect();
                assert!(close(&logits, &want, 1e-5), "{arch:?} token {token}");
                assert_eq!(argmax_of(&logits), argmax_of(&want));
            }
        }
    }

    #[test]
    fn llama3_inverse_frequencies_match_the_config_multipliers_in_all_three_bands() {
        let cfg = ModelConfig::synthetic("tiny-llama3").unwrap();
        let d = cfg.head_dim;
        let plain: Vec<f64> = (0..d / 2)
            .map(|i| (cfg.rope_theta as f64).powf(-2.0 * i as f64 / d as f64))
            .collect();
        let scaled = rope_inv_freq(&cfg);
        let mul = cfg.rope_freq_multipliers().unwrap();
        let (mut kept, mut blended, mut divided) = (0, 0, 0);
        for i in 0..d / 2 {
            let r = scaled[i] / plain[i];
            assert!(
                (r - mul[i] as f64).abs() < 1e-6,
                "pair {i}: {r} vs {}",
                mul[i]
            );
            match r {
                r if (r - 1.0).abs() < 1e-12 => kept += 1,
                r if (r - 1.0 / 8.0).abs() < 1e-12 => divided += 1,
                _ => blended += 1,
            }
        }
        assert!(
            kept > 0 && blended > 0 && divided > 0,
            "{kept} / {blended} / {divided}"
        );
        // GGUF's form: divisors per pair.
        let factors = RopeScaling::Factors(mul.iter().map(|m| 1.0 / m).collect());
        let gguf = ModelConfig {
            rope_scaling: Some(factors),
            ..cfg.clone()
        };
        for (a, b) in rope_inv_freq(&gguf).iter().zip(&scaled) {
            assert!((a / b - 1.0).abs() < 1e-6, "{a} vs {b}");
        }
        // Linear scaling: every frequency divided by the factor.
        let linear = ModelConfig {
            rope_scaling: Some(RopeScaling::Linear { factor: 4.0 }),
            ..cfg.clone()
        };
        let mul = linear.rope_freq_multipliers().unwrap();
        for ((a, b), m) in rope_inv_freq(&linear).iter().zip(&plain).zip(&mul) {
            assert!((a / b - 0.25).abs() < 1e-12 && *m == 0.25, "{a} / {b}, {m}");
        }
    }

    #[test]
    fn qwen2_biases_enter_q_k_and_v() {
        // All projections zero: attention returns v = bv, so the residual after o is
        // Wo . bv; zero biases leave the embedding alone.
        let cfg = ModelConfig::synthetic("tiny-qwen2").unwrap();
        let mut w = synthetic_f32(&cfg, 3, DType::F32);
        for l in 0..cfg.layers {
            for t in [T::Q, T::K, T::V, T::Down] {
                w.get_mut(&t.hf_name(l)).unwrap().fill(0.0);
            }
        }
        let with = CpuModel::new(&cfg, w.clone()).unwrap().forward(7).unwrap();
        for l in 0..cfg.layers {
            w.get_mut(&T::VBias.hf_name(l)).unwrap().fill(0.0);
        }
        let without = CpuModel::new(&cfg, w).unwrap().forward(7).unwrap();
        assert!(!close(&with, &without, 1e-3), "v bias had no effect");
    }

    fn argmax_of(x: &[f32]) -> u32 {
        crate::sampler::argmax(x).unwrap()
    }

    #[test]
    fn gqa_equals_mha_with_shared_kv_rows_copied() {
        for arch in [Arch::Qwen3, Arch::Llama] {
            let gqa = ModelConfig {
                layers: 2,
                ..one_layer(arch)
            };
            let mha = ModelConfig {
                kv_heads: gqa.heads,
                ..gqa.clone()
            };
            let wg = synthetic_f32(&gqa, 21, DType::F32);
            let mut wm = wg.clone();
            let (d, h) = (gqa.head_dim, gqa.hidden);
            for l in 0..gqa.layers {
                for p in ["self_attn.k_proj.weight", "self_attn.v_proj.weight"] {
                    let src = &wg[&layer_tensor(l, p)];
                    // MHA head j uses the rows of GQA kv head j / group
                    let dup: Vec<f32> = (0..mha.heads)
                        .flat_map(|j| {
                            src[(j / gqa.group_size()) * d * h..][..d * h]
                                .iter()
                                .copied()
                        })
                        .collect();
                    wm.insert(layer_tensor(l, p), dup);
                }
            }
            let (mut a, mut b) = (
                CpuModel::new(&gqa, wg).unwrap(),
                CpuModel::new(&mha, wm).unwrap(),
            );
            for t in [3u32, 17, 42, 42, 99, 0, 64] {
                let (x, y) = (a.forward(t).unwrap(), b.forward(t).unwrap());
                assert!(close(&x, &y, 1e-6), "{arch:?} token {t}");
            }
        }
    }

    /// A layer-major full-sequence forward without a KV cache, written independently of
    /// `forward`'s token-major loop: the logits of the last position.
    fn naive_prefill_last_logits(
        cfg: &ModelConfig,
        w: &HashMap<String, Vec<f32>>,
        tokens: &[u32],
    ) -> Vec<f32> {
        let (h, d, eps) = (cfg.hidden, cfg.head_dim, cfg.rms_eps);
        let mut xs: Vec<Vec<f32>> = tokens
            .iter()
            .map(|&t| w[EMBED][t as usize * h..][..h].to_vec())
            .collect();
        for l in 0..cfg.layers {
            let g = |p: &str| &w[&layer_tensor(l, p)];
            let norm_heads = |v: &mut Vec<f32>, p: &str| {
                if cfg.arch.has_qk_norm() {
                    *v = v.chunks(d).flat_map(|c| rms_norm(c, g(p), eps)).collect();
                }
            };
            let mut ks = Vec::new();
            let mut vs = Vec::new();
            let mut qs = Vec::new();
            for (pos, x) in xs.iter().enumerate() {
                let xn = rms_norm(x, g("input_layernorm.weight"), eps);
                let (mut q, mut k) = (
                    matvec(g("self_attn.q_proj.weight"), &xn),
                    matvec(g("self_attn.k_proj.weight"), &xn),
                );
                norm_heads(&mut q, "self_attn.q_norm.weight");
                norm_heads(&mut k, "self_attn.k_norm.weight");
                rope_inplace(&mut q, d, pos, cfg.rope_theta);
                rope_inplace(&mut k, d, pos, cfg.rope_theta);
                qs.push(q);
                ks.extend(k);
                vs.extend(matvec(g("self_attn.v_proj.weight"), &xn));
            }
            for (pos, x) in xs.iter_mut().enumerate() {
                let att = attention(&qs[pos], &ks, &vs, pos + 1, cfg.heads, cfg.kv_heads, d);
                let o = matvec(g("self_attn.o_proj.weight"), &att);
                x.iter_mut().zip(o).for_each(|(a, b)| *a += b);
                let xn = rms_norm(x, g("post_attention_layernorm.weight"), eps);
                let (gt, up) = (
                    matvec(g("mlp.gate_proj.weight"), &xn),
                    matvec(g("mlp.up_proj.weight"), &xn),
                );
                let act: Vec<f32> = gt.iter().zip(&up).map(|(a, b)| silu(*a) * b).collect();
                x.iter_mut()
                    .zip(matvec(g("mlp.down_proj.weight"), &act))
                    .for_each(|(a, b)| *a += b);
            }
        }
        let xn = rms_norm(xs.last().unwrap(), &w[FINAL_NORM], eps);
        matvec(
            if cfg.tied_embeddings {
                &w[EMBED]
            } else {
                &w[LM_HEAD]
            },
            &xn,
        )
    }

    #[test]
    fn cached_decode_matches_layer_major_recompute() {
        for name in ["tiny", "tiny-llama"] {
            let cfg = ModelConfig::synthetic(name).unwrap();
            let w = synthetic_f32(&cfg, DEFAULT_SEED, DType::BF16);
            let mut m = CpuModel::new(&cfg, w.clone()).unwrap();
            let tokens = [1u32, 200, 37, 37, 5, 128, 255, 0, 77];
            for (i, &t) in tokens.iter().enumerate() {
                let got = m.forward(t).unwrap();
                if i % 4 == 0 || i == tokens.len() - 1 {
                    let want = naive_prefill_last_logits(&cfg, &w, &tokens[..=i]);
                    assert!(close(&got, &want, 1e-5), "{name} at position {i}");
                }
            }
        }
    }

    #[test]
    fn decode_is_deterministic_and_reset_reproduces_it() {
        for name in ["tiny", "tiny-llama"] {
            let cfg = ModelConfig::synthetic(name).unwrap();
            let mut m = CpuModel::synthetic(&cfg, DEFAULT_SEED, DType::F16).unwrap();
            let first = m.generate_greedy(&[1, 2, 3], 32).unwrap();
            assert_eq!(m.position(), 3 + 31);
            let a = m.forward(9).unwrap();
            m.reset();
            assert_eq!(m.position(), 0);
            assert_eq!(m.generate_greedy(&[1, 2, 3], 32).unwrap(), first);
            assert_eq!(m.forward(9).unwrap(), a);
            let mut other = CpuModel::synthetic(&cfg, DEFAULT_SEED, DType::F16).unwrap();
            assert_eq!(other.generate_greedy(&[1, 2, 3], 32).unwrap(), first);
            // the context matters: a different prompt gives different logits
            other.reset();
            other.forward(4).unwrap();
            assert_ne!(other.forward(9).unwrap(), {
                m.reset();
                m.forward(5).unwrap();
                m.forward(9).unwrap()
            });
            // logits are O(1) and finite
            let std = (a.iter().map(|v| v * v).sum::<f32>() / a.len() as f32).sqrt();
            assert!(
                a.iter().all(|v| v.is_finite()) && (0.3..10.0).contains(&std),
                "{name}: std {std}"
            );
            // the next token depends on the input: first-step argmax over all inputs is varied
            let mut firsts: Vec<u32> = (0..cfg.vocab as u32)
                .map(|t| {
                    m.reset();
                    crate::sampler::argmax(&m.forward(t).unwrap()).unwrap()
                })
                .collect();
            firsts.sort_unstable();
            firsts.dedup();
            assert!(
                firsts.len() > cfg.vocab / 4,
                "{name}: only {} distinct first tokens",
                firsts.len()
            );
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        let cfg = ModelConfig {
            max_positions: 2,
            ..ModelConfig::synthetic("tiny").unwrap()
        };
        let w = synthetic_f32(&cfg, 1, DType::F32);
        let mut m = CpuModel::new(&cfg, w.clone()).unwrap();
        let e = m.forward(256).unwrap_err().to_string();
        assert!(e.contains("256") && e.contains("vocab 256"), "{e}");
        m.forward(1).unwrap();
        m.forward(2).unwrap();
        let e = m.forward(3).unwrap_err().to_string();
        assert!(
            e.contains("position 2") && e.contains("max_positions 2"),
            "{e}"
        );
        let mut w2 = w.clone();
        w2.remove(FINAL_NORM);
        let e = CpuModel::new(&cfg, w2).unwrap_err().to_string();
        assert!(e.contains(FINAL_NORM) && e.contains("missing"), "{e}");
        let mut w3 = w;
        w3.get_mut("model.layers.1.mlp.up_proj.weight")
            .unwrap()
            .pop();
        let e = CpuModel::new(&cfg, w3).unwrap_err().to_string();
        assert!(e.contains("12287") && e.contains("12288"), "{e}");
        assert!(m.generate_greedy(&[], 3).is_err());
    }

    #[test]
    fn from_files_equals_synthetic() {
        let d = crate::safetensors::TestDir::new("ref-files");
        let cfg = crate::weights::write_synthetic_hf_dir(&d.0, "tiny-llama", DType::BF16).unwrap();
        let mut a = CpuModel::from_files(&ModelFiles::open(&d.0).unwrap()).unwrap();
        let mut b = CpuModel::synthetic(&cfg, DEFAULT_SEED, DType::BF16).unwrap();
        assert_eq!(
            a.generate_greedy(&[7], 8).unwrap(),
            b.generate_greedy(&[7], 8).unwrap()
        );
    }
}
