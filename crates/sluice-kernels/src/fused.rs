//! Selectors of the matvec family's fused variants (`matvec_norm_*`,
//! `matvec_silu_norm_*`); their push constants are [`crate::MatvecPush`].

use sluice::kernel::KernelDesc;

use crate::{MatvecPush, WeightDtype};

const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_NORM_F16.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_NORM_BF16.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_NORM_F32.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_SILU_NORM_F16.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_SILU_NORM_BF16.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_SILU_NORM_F32.push_constant_bytes as usize
);

/// `matvec_norm` (RMSNorm feeding a matvec) for a weight dtype.
pub fn matvec_norm(dtype: WeightDtype) -> &'static KernelDesc {
    crate::by_dtype(dtype, "matvec_norm")
}

/// `matvec_silu_norm` (RMSNorm + gate/up + SiLU·mul) for a weight dtype.
pub fn matvec_silu_norm(dtype: WeightDtype) -> &'static KernelDesc {
    crate::by_dtype(dtype, "matvec_silu_norm")
}

/// Push constants of [`crate::ATTENTION_ROPE`], [`crate::ATTENTION_ROPE_EXT`] and
/// [`crate::ATTENTION_ROPE_Q8`]:
/// attention with the q/k RMSNorm, rotary embedding and KV append folded in. Bindings:
/// 0 params (read), 1 q|k|v (read), 2 q_norm f32 `[hd]`, 3 k_norm f32 `[hd]` (read),
/// 4 kcache, 5 vcache, 6 partial, 7 counters u32 `[heads]`, 8 out f32 `[heads*hd]`
/// (read-write, as `attention_split`); the `_EXT` kernel (q/k/v biases, RoPE scaling under
/// the flags) also 9 q/k/v biases and 10 RoPE multipliers (read, as
/// [`crate::QkRopePush`]'s). Dispatch
/// `[splits, heads, 1]`: one dispatch, the combine included.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct AttnRopePush {
    /// Query heads.
    pub heads: u32,
    /// Key/value heads (divides `heads`).
    pub kv_heads: u32,
    /// Head dimension (even, <= 256).
    pub head_dim: u32,
    /// KV-cache capacity in positions.
    pub capacity: u32,
    /// Positions per split (<= 256).
    pub chunk: u32,
    /// Splits.
    pub splits: u32,
    /// Score scale, usually `1 / sqrt(head_dim)`.
    pub scale: f32,
    /// [`crate::ROPE_NORM`] | [`crate::ROPE_BIAS`] | [`crate::ROPE_FREQ`] (see [`crate::QkRopePush`]).
    pub flags: u32,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// RoPE base.
    pub theta: f32,
    /// First float of k in the q|k|v buffer.
    pub k_offset: u32,
    /// First float of v in the q|k|v buffer.
    pub v_offset: u32,
    /// [`crate::ATTENTION_ROPE_Q8`], non-zero: each head's output also goes to `attn` as
    /// q8 records from this float on (block b at `q8_at + 12 b`,
    /// [`crate::Q8_RECORD_FLOATS`]), what the integer-dot o projection would make of it
    /// ([`crate::matvec_xq8`]); `head_dim` a multiple of 32. The other kernels ignore it.
    pub q8_at: u32,
}
const _: () = assert!(
    std::mem::size_of::<AttnRopePush>() == crate::ATTENTION_ROPE.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<AttnRopePush>() == crate::ATTENTION_ROPE_EXT.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<AttnRopePush>() == crate::ATTENTION_ROPE_Q8.push_constant_bytes as usize
);

/// Push constants of [`crate::ADVANCE_PARAMS`]: advance the position by `steps` (1 after a
/// decode step, T after a prefill chunk of T tokens) and record the chosen token there.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct AdvancePush {
    /// Positions to advance.
    pub steps: u32,
}
const _: () = assert!(
    std::mem::size_of::<AdvancePush>() == crate::ADVANCE_PARAMS.push_constant_bytes as usize
);

/// The prefill (many tokens per dispatch, token index = workgroup z) variants of the
/// matvec family: `matvec_tokens`, `matvec_norm_tokens`, `matvec_silu_norm_tokens`.
pub fn matvec_tokens(dtype: WeightDtype) -> [&'static KernelDesc; 3] {
    [
        crate::by_dtype(dtype, "matvec_tokens"),
        crate::by_dtype(dtype, "matvec_norm_tokens"),
        crate::by_dtype(dtype, "matvec_silu_norm_tokens"),
    ]
}

/// The prefill variant of `matvec_silu` (gate/up + SiLU·mul without the folded norm).
pub fn matvec_silu_tokens(dtype: WeightDtype) -> &'static KernelDesc {
    crate::by_dtype(dtype, "matvec_silu_tokens")
}
const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_SILU_TOKENS_F16.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_TOKENS_F16.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<MatvecPush>() == crate::MATVEC_NORM_TOKENS_F16.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<MatvecPush>()
        == crate::MATVEC_SILU_NORM_TOKENS_F16.push_constant_bytes as usize
);

/// Push constants of [`crate::SAMPLE`]: bindings 0 logits (read), 1 result
/// (read-write, [`crate::TokenResult`] layout), 2 params (read-write: `params.token := index`); one workgroup. The draw
/// uses `params.pos` as its step, so a replayed step samples anew each token.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SamplePush {
    /// Logit count.
    pub n: u32,
    /// Keep the `top_k` largest logits (ties at the threshold included); 0 = all.
    pub top_k: u32,
    /// Softmax temperature; below [`SAMPLE_MIN_TEMPERATURE`] the kernel is greedy.
    pub temperature: f32,
    /// Nucleus mass in (0, 1]; 1 = off.
    pub top_p: f32,
    /// Low 32 bits of the seed.
    pub seed_lo: u32,
    /// High 32 bits of the seed.
    pub seed_hi: u32,
    /// Zero.
    pub _pad: [u32; 2],
}
const _: () =
    assert!(std::mem::size_of::<SamplePush>() == crate::SAMPLE.push_constant_bytes as usize);

fn sample_key(v: f32) -> u32 {
    let b = v.to_bits();
    if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

fn sample_mix(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// Temperatures below this make [`crate::SAMPLE`] greedy (1 / temperature would overflow).
pub const SAMPLE_MIN_TEMPERATURE: f32 = 1e-6;

/// CPU reference of [`crate::SAMPLE`] at position `pos` (same thresholds and hash; sums in
/// another order, so a draw that lands within rounding of a boundary may differ).
pub fn sample_cpu(logits: &[f32], p: &SamplePush, pos: u32) -> u32 {
    let valid = |v: f32| v.is_finite();
    let m = logits
        .iter()
        .copied()
        .filter(|v| valid(*v))
        .fold(f32::MIN, f32::max);
    let greedy = p.temperature.is_nan() || p.temperature < SAMPLE_MIN_TEMPERATURE;
    let inv_t = if greedy { 1.0 } else { 1.0 / p.temperature };
    let weight = |v: f32| -> f32 {
        if greedy {
            if v == m {
                1.0
            } else {
                0.0
            }
        } else {
            ((v - m) * inv_t).exp()
        }
    };
    let n = logits.len() as u32;
    let mut lo = 0u32;
    if p.top_k > 0 && p.top_k < n {
        let mut hi = u32::MAX;
        while lo < hi {
            let mid = lo + (hi - lo) / 2 + 1;
            let c = logits
                .iter()
                .filter(|v| valid(**v) && sample_key(**v) >= mid)
                .count() as u32;
            if c >= p.top_k {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
    }
    let mass = |thr: u32| -> f32 {
        logits
            .iter()
            .filter(|v| valid(**v) && sample_key(**v) >= thr)
            .map(|v| weight(*v))
            .sum()
    };
    let z = mass(lo);
    let mut thr = lo;
    if p.top_p < 1.0 {
        let mut hi = u32::MAX;
        let want = p.top_p * z;
        while thr < hi {
            let mid = thr + (hi - thr) / 2 + 1;
            if mass(mid) >= want {
                thr = mid;
            } else {
                hi = mid - 1;
            }
        }
    }
    let total = mass(thr);
    let u = if greedy {
        0.0
    } else {
        (sample_mix(sample_mix(p.seed_lo ^ sample_mix(p.seed_hi)) ^ pos) >> 8) as f32 / 16_777_216.0
    };
    let goal = u * total;
    let mut acc = 0.0;
    let mut last = 0;
    for (i, v) in logits.iter().enumerate() {
        if valid(*v) && sample_key(*v) >= thr {
            acc += weight(*v);
            last = i as u32;
            if goal < acc {
                return i as u32;
            }
        }
    }
    last
}
