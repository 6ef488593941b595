//! CPU references (f32 in and out, f64 sums) of the LLM kernels, for tests and for
//! building expected values. Matrices here are unpadded row-major `[rows, cols]` f32; use
//! [`crate::round_to`] on the values first to model f16/bf16 weights.

use crate::{AttnPush, QkRopePush};

/// `silu(g) = g / (1 + exp(-g))`.
pub fn silu(g: f32) -> f32 {
    g / (1.0 + (-g).exp())
}

/// Reference of `embed`: row `token` of the `[vocab, cols]` table.
pub fn embed_cpu(table: &[f32], cols: usize, token: u32) -> Vec<f32> {
    let t = token as usize;
    table[t * cols..(t + 1) * cols].to_vec()
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&a, &b)| a as f64 * b as f64).sum()
}

/// Reference of `matvec`: `W x`, plus `y_in` when given (the `accumulate` mode).
pub fn matvec_cpu(
    w: &[f32],
    rows: usize,
    cols: usize,
    x: &[f32],
    y_in: Option<&[f32]>,
) -> Vec<f32> {
    (0..rows)
        .map(|r| {
            let base = y_in.map_or(0.0, |y| y[r] as f64);
            (base + dot(&w[r * cols..(r + 1) * cols], &x[..cols])) as f32
        })
        .collect()
}

/// Reference of `matvec_silu`: `silu(Wg x) * (Wu x)`.
pub fn matvec_silu_cpu(
    w_gate: &[f32],
    w_up: &[f32],
    rows: usize,
    cols: usize,
    x: &[f32],
) -> Vec<f32> {
    let g = matvec_cpu(w_gate, rows, cols, x, None);
    let u = matvec_cpu(w_up, rows, cols, x, None);
    silu_mul_cpu(&g, &u)
}

/// Reference of `rmsnorm` over consecutive rows of `n` (x.len() / n rows).
pub fn rmsnorm_cpu(x: &[f32], w: &[f32], n: usize, eps: f32) -> Vec<f32> {
    x.chunks(n)
        .flat_map(|row| {
            let ms = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / n as f64;
            let scale = 1.0 / (ms + eps as f64).sqrt();
            row.iter()
                .zip(w)
                .map(move |(&v, &w)| (v as f64 * scale * w as f64) as f32)
        })
        .collect()
}

/// Reference of `silu_mul`.
pub fn silu_mul_cpu(g: &[f32], u: &[f32]) -> Vec<f32> {
    g.iter().zip(u).map(|(&g, &u)| silu(g) * u).collect()
}

/// Reference of `add`: `y + a`.
pub fn add_cpu(a: &[f32], y: &[f32]) -> Vec<f32> {
    a.iter().zip(y).map(|(&a, &y)| y + a).collect()
}

/// Rotary embedding of one head in place (HF rotate-half layout), with HF's f32 steps:
/// `inv_freq_i = theta^(-2i/hd)`, `angle = pos * inv_freq_i` in f32; sin/cos in f64 of that.
pub fn rope_cpu(x: &mut [f32], pos: u32, theta: f32) {
    rope_scaled_cpu(x, pos, theta, None)
}

/// [`rope_cpu`] with inv_freq of pair i multiplied by `freq[i]` when given (RoPE scaling,
/// the kernels' `ROPE_FREQ`).
pub fn rope_scaled_cpu(x: &mut [f32], pos: u32, theta: f32, freq: Option<&[f32]>) {
    let hd = x.len();
    let half = hd / 2;
    for i in 0..half {
        let mul = freq.map_or(1.0, |f| f[i]);
        let inv_freq = theta.powf(-((2 * i) as f32) / hd as f32) * mul;
        let angle = (pos as f32 * inv_freq) as f64;
        let (s, c) = angle.sin_cos();
        let (a, b) = (x[i] as f64, x[i + half] as f64);
        x[i] = (a * c - b * s) as f32;
        x[i + half] = (b * c + a * s) as f32;
    }
}

/// Per-head RMSNorm of one head in place.
pub fn head_norm_cpu(x: &mut [f32], w: &[f32], eps: f32) {
    let y = rmsnorm_cpu(x, w, x.len(), eps);
    x.copy_from_slice(&y);
}

/// The optional inputs of the rope kernels, read under their `flags` bits: q/k/v biases
/// packed `[q | k | v]` (`ROPE_BIAS`) and per-pair inv_freq multipliers (`ROPE_FREQ`).
#[derive(Clone, Copy, Debug, Default)]
pub struct RopeExtras<'a> {
    /// `[(heads + 2 kv_heads) * hd]`.
    pub bias: &'a [f32],
    /// `[hd / 2]`.
    pub freq: &'a [f32],
}

/// Reference of `qk_norm_rope` without the cache: transforms every q head and k head in
/// place (bias added with `ROPE_BIAS`, norm with `ROPE_NORM`, then rope at `pos`, scaled
/// with `ROPE_FREQ`), and adds v's bias to `v`. The kernel stores the new k and v, rounded
/// to f16, at `[j, pos, :]` of the caches.
#[allow(clippy::too_many_arguments)]
pub fn qk_norm_rope_cpu(
    p: &QkRopePush,
    pos: u32,
    q: &mut [f32],
    k: &mut [f32],
    v: &mut [f32],
    q_norm: &[f32],
    k_norm: &[f32],
    extras: RopeExtras<'_>,
) {
    let hd = p.head_dim as usize;
    let (qd, kvd) = (p.heads as usize * hd, p.kv_heads as usize * hd);
    if p.flags & crate::ROPE_BIAS != 0 {
        let b = extras.bias;
        for (x, b) in [
            (&mut *q, &b[..qd]),
            (&mut *k, &b[qd..qd + kvd]),
            (&mut *v, &b[qd + kvd..qd + 2 * kvd]),
        ] {
            x.iter_mut().zip(b).for_each(|(x, b)| *x += b);
        }
    }
    let freq = (p.flags & crate::ROPE_FREQ != 0).then_some(extras.freq);
    for (heads, x, w) in [(p.heads, &mut *q, q_norm), (p.kv_heads, &mut *k, k_norm)] {
        for head in x.chunks_mut(hd).take(heads as usize) {
            if p.flags & crate::ROPE_NORM != 0 {
                head_norm_cpu(head, w, p.eps);
            }
            rope_scaled_cpu(head, pos, p.theta, freq);
        }
    }
}

/// Reference of `attention_split`: the `[heads, splits, hd + 2]` partials (m, l, o) for a
/// sequence of `seq_len` positions, [`crate::attention_chunk_for`] positions per split;
/// caches as f32 `[kv_heads, capacity, hd]`. Empty splits hold (-3e38, 0, 0...).
pub fn attention_partials_cpu(
    p: &AttnPush,
    seq_len: u32,
    q: &[f32],
    kcache: &[f32],
    vcache: &[f32],
) -> Vec<f32> {
    let (hd, cap) = (p.head_dim as usize, p.capacity as usize);
    let seq = (seq_len as usize).min(cap);
    let chunk = crate::attention_chunk_for(seq as u32, p.chunk, p.heads, p.splits) as usize;
    let group = (p.heads / p.kv_heads) as usize;
    let mut out = Vec::with_capacity(p.heads as usize * p.splits as usize * (hd + 2));
    for h in 0..p.heads as usize {
        let kvh = h / group;
        let qh = &q[h * hd..(h + 1) * hd];
        for s in 0..p.splits as usize {
            let (start, end) = (s * chunk, ((s + 1) * chunk).min(seq));
            if start >= end {
                out.push(-3.0e38);
                out.extend(std::iter::repeat_n(0.0, hd + 1));
                continue;
            }
            let row = |c: &'_ [f32], t: usize| -> Vec<f32> {
                c[(kvh * cap + t) * hd..(kvh * cap + t + 1) * hd].to_vec()
            };
            let scores: Vec<f64> = (start..end)
                .map(|t| p.scale as f64 * dot(qh, &row(kcache, t)))
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let mut o = vec![0f64; hd];
            for (t, &e) in (start..end).zip(&e) {
                for (o, &v) in o.iter_mut().zip(&row(vcache, t)) {
                    *o += e * v as f64;
                }
            }
            out.push(m as f32);
            out.push(e.iter().sum::<f64>() as f32);
            out.extend(o.iter().map(|&v| v as f32));
        }
    }
    out
}

/// Reference of decode attention (`attention_split` then `attention_combine`): softmax
/// over positions `0..seq_len` of `scale * q.k`, weighted sum of v, per query head (kv
/// head `h / (heads / kv_heads)`). Caches as f32 `[kv_heads, capacity, hd]`.
pub fn attention_cpu(
    p: &AttnPush,
    seq_len: u32,
    q: &[f32],
    kcache: &[f32],
    vcache: &[f32],
) -> Vec<f32> {
    let full = AttnPush {
        chunk: p.capacity,
        splits: 1,
        ..*p
    };
    let partial = attention_partials_cpu(&full, seq_len, q, kcache, vcache);
    let hd = p.head_dim as usize;
    partial
        .chunks(hd + 2)
        .flat_map(|c| c[2..].iter().map(move |&o| o / c[1]).collect::<Vec<_>>())
        .collect()
}

/// Reference of the `nonfinite` word of `argmax` / `sample`: how many values are NaN or ±inf.
pub fn nonfinite_cpu(v: &[f32]) -> u32 {
    v.iter().filter(|x| !x.is_finite()).count() as u32
}

/// Reference of `argmax`: (index, value) of the largest value, lowest index on ties, NaN
/// never wins (all NaN: index 0).
pub fn argmax_cpu(v: &[f32]) -> (u32, f32) {
    let mut best: Option<(usize, f32)> = None;
    for (i, &x) in v.iter().enumerate() {
        if x.is_nan() {
            continue;
        }
        if best.is_none_or(|(_, b)| x > b) {
            best = Some((i, x));
        }
    }
    best.map_or((0, v[0]), |(i, x)| (i as u32, x))
}
