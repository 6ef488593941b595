//! The tiled matmul family for prompt processing and batched decode: many tokens against
//! one weight matrix, `Y[t, r] = sum_c W[r, c] * X[t, c]` (tokens x weights^T), with the
//! fused variants of the matvec family (residual add, RMSNorm on the input, gate/up +
//! SiLU). Two implementations: a portable shared-memory tiling (`matmul*_<dtype>`, any
//! Vulkan device) and one on the matrix units (`matmul*_cm_<dtype>`,
//! VK_KHR_cooperative_matrix with 16x16 f16 tiles, f32 accumulate).

use sluice::kernel::KernelDesc;

use crate::WeightDtype;

/// What a matmul kernel computes around `W . x` (see [`MatmulPush`] for the bindings).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatmulVariant {
    /// `y = W . x`, or `y += W . x` with `accumulate` (the residual add).
    Plain,
    /// RMSNorm folded on the input: `y (+)= inv_t * W . (x * norm_w)`.
    Norm,
    /// Gate/up + SiLU: `y = silu(Wg . x) * (Wu . x)`.
    Silu,
    /// RMSNorm + gate/up + SiLU: with `x' = x * norm_w * inv_t`, `y = silu(Wg . x') * (Wu . x')`.
    SiluNorm,
}

impl MatmulVariant {
    /// Every variant.
    pub const ALL: [MatmulVariant; 4] = [
        MatmulVariant::Plain,
        MatmulVariant::Norm,
        MatmulVariant::Silu,
        MatmulVariant::SiluNorm,
    ];

    /// True for the variants with a norm-weight binding.
    pub fn has_norm(self) -> bool {
        matches!(self, MatmulVariant::Norm | MatmulVariant::SiluNorm)
    }

    /// True for the variants with two weight matrices (gate, up).
    pub fn has_silu(self) -> bool {
        matches!(self, MatmulVariant::Silu | MatmulVariant::SiluNorm)
    }
}

/// Push constants of every matmul kernel.
///
/// Bindings (the matvec family's order): `Plain` 0 w, 1 x (read), 2 y (read-write);
/// `Norm` 0 w, 1 x, 2 norm_w f32 `[cols]` (read), 3 y; `Silu` 0 w_gate, 1 w_up, 2 x
/// (read), 3 y; `SiluNorm` 0 w_gate, 1 w_up, 2 x, 3 norm_w (read), 4 y.
/// Weights row-major `[rows, cols]` in the GPU layout of their dtype ([`crate::pack_weights`];
/// float dtypes padded to [`crate::stride8`]`(cols) * 8` elements, block formats with
/// `cols` a multiple of the block); x f32, token t's row at float `t * x_stride`; y f32, token
/// t's row at float `t * y_stride`. Dispatch [`matmul_groups`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MatmulPush {
    /// Output rows (weight rows).
    pub rows: u32,
    /// Input columns.
    pub cols: u32,
    /// Row stride of the weights: 8-element chunks for float dtypes, vec4s for block
    /// formats ([`crate::row_stride_field`]`(dtype, cols)`, as in [`crate::MatvecPush`]).
    pub stride8: u32,
    /// Tokens (rows of x and y).
    pub tokens: u32,
    /// Floats between consecutive tokens' x: a multiple of 4 and `>= cols`.
    pub x_stride: u32,
    /// Floats between consecutive tokens' y (`>= rows`).
    pub y_stride: u32,
    /// Non-zero: `y += ...` (Plain, Norm); ignored by the SiLU variants.
    pub accumulate: u32,
    /// RMSNorm epsilon (Norm, SiluNorm).
    pub eps: f32,
}

impl MatmulPush {
    /// Push constants for `tokens` x `[rows, cols]` weights of a float dtype with densely
    /// packed x and y (`x_stride = cols` rounded up to 4, `y_stride = rows`), overwriting
    /// y; for block formats use [`MatmulPush::for_dtype`].
    pub fn new(rows: u32, cols: u32, tokens: u32) -> MatmulPush {
        MatmulPush {
            rows,
            cols,
            stride8: crate::stride8(cols),
            tokens,
            x_stride: cols.div_ceil(4) * 4,
            y_stride: rows,
            accumulate: 0,
            eps: 0.0,
        }
    }
}

impl MatmulPush {
    /// Like [`MatmulPush::new`] with the row stride of `dt`'s GPU layout.
    pub fn for_dtype(dt: WeightDtype, rows: u32, cols: u32, tokens: u32) -> MatmulPush {
        MatmulPush {
            stride8: crate::row_stride_field(dt, cols),
            ..MatmulPush::new(rows, cols, tokens)
        }
    }
}

/// Output tile (tokens, rows) of the portable kernels.
pub const MATMUL_TILE: (u32, u32) = (64, 64);
/// Output tile (tokens, rows) of the cooperative-matrix kernels.
pub const MATMUL_CM_TILE: (u32, u32) = (64, 128);

/// The matmul kernel for a weight dtype and variant; `coopmat` picks the
/// cooperative-matrix implementation (only on a device whose
/// `DeviceInfo::coopmat_f16_16x16` is true).
pub fn matmul(dt: WeightDtype, variant: MatmulVariant, coopmat: bool) -> &'static KernelDesc {
    let stem = match (coopmat, variant) {
        (false, MatmulVariant::Plain) => "matmul",
        (false, MatmulVariant::Norm) => "matmul_norm",
        (false, MatmulVariant::Silu) => "matmul_silu",
        (false, MatmulVariant::SiluNorm) => "matmul_silu_norm",
        (true, MatmulVariant::Plain) => "matmul_cm",
        (true, MatmulVariant::Norm) => "matmul_cm_norm",
        (true, MatmulVariant::Silu) => "matmul_cm_silu",
        (true, MatmulVariant::SiluNorm) => "matmul_cm_silu_norm",
    };
    crate::by_dtype(dt, stem)
}

/// Dispatch size of a matmul kernel for `rows` output rows and `tokens` tokens: one
/// workgroup per output tile ([`MATMUL_TILE`] or [`MATMUL_CM_TILE`]).
pub fn matmul_groups(rows: u32, tokens: u32, coopmat: bool) -> [u32; 3] {
    let (tt, tr) = if coopmat { MATMUL_CM_TILE } else { MATMUL_TILE };
    [rows.div_ceil(tr).max(1), tokens.div_ceil(tt).max(1), 1]
}

/// CPU reference of every matmul variant. `w`, `w_b` row-major `[rows, cols]` (unpadded,
/// already rounded to the weight dtype), `x` tokens x `x_stride`, `y0` the previous y
/// (tokens x `y_stride`, used by `accumulate`, copied elsewhere). Returns y.
pub fn matmul_cpu(
    variant: MatmulVariant,
    p: &MatmulPush,
    w: &[f32],
    w_b: Option<&[f32]>,
    norm_w: Option<&[f32]>,
    x: &[f32],
    y0: &[f32],
) -> Vec<f32> {
    let (rows, cols) = (p.rows as usize, p.cols as usize);
    let mut y = y0.to_vec();
    for t in 0..p.tokens as usize {
        let xt = &x[t * p.x_stride as usize..][..cols];
        let mut xn: Vec<f64> = xt.iter().map(|&v| v as f64).collect();
        let mut inv = 1.0f64;
        if variant.has_norm() {
            let nw = norm_w.expect("norm weight");
            let ms = xn.iter().map(|v| v * v).sum::<f64>() / cols as f64;
            inv = 1.0 / (ms + p.eps as f64).sqrt();
            for (v, &n) in xn.iter_mut().zip(nw) {
                *v *= n as f64;
            }
        }
        for r in 0..rows {
            let dot = |m: &[f32]| -> f64 {
                m[r * cols..(r + 1) * cols]
                    .iter()
                    .zip(&xn)
                    .map(|(&a, &b)| a as f64 * b)
                    .sum::<f64>()
                    * inv
            };
            let g = dot(w);
            let o = t * p.y_stride as usize + r;
            y[o] = if variant.has_silu() {
                let u = dot(w_b.expect("second matrix"));
                (g / (1.0 + (-g).exp()) * u) as f32
            } else if p.accumulate != 0 {
                (y[o] as f64 + g) as f32
            } else {
                g as f32
            };
        }
    }
    y
}

macro_rules! check_push {
    ($($k:ident),*) => {
        $(const _: () = assert!(
            std::mem::size_of::<MatmulPush>() == crate::$k.push_constant_bytes as usize
        );)*
    };
}
check_push!(
    MATMUL_F16,
    MATMUL_BF16,
    MATMUL_F32,
    MATMUL_NORM_F16,
    MATMUL_NORM_BF16,
    MATMUL_NORM_F32,
    MATMUL_SILU_F16,
    MATMUL_SILU_BF16,
    MATMUL_SILU_F32,
    MATMUL_SILU_NORM_F16,
    MATMUL_SILU_NORM_BF16,
    MATMUL_SILU_NORM_F32,
    MATMUL_CM_F16,
    MATMUL_CM_BF16,
    MATMUL_CM_F32,
    MATMUL_CM_NORM_F16,
    MATMUL_CM_NORM_BF16,
    MATMUL_CM_NORM_F32,
    MATMUL_CM_SILU_F16,
    MATMUL_CM_SILU_BF16,
    MATMUL_CM_SILU_F32,
    MATMUL_CM_SILU_NORM_F16,
    MATMUL_CM_SILU_NORM_BF16,
    MATMUL_CM_SILU_NORM_F32,
    MATMUL_Q4_K,
    MATMUL_CM_SILU_NORM_Q6_K
);

/// Push constants of [`crate::ATTENTION_PREFILL`] (flash attention over a prefill chunk).
/// Bindings: 0 params `{token, pos, seq_len, pad}` (read; `seq_len = pos + 1` for the
/// chunk's first token), 1 q f32 (read), 2 kcache, 3 vcache (read; f16 pairs,
/// `[kv_heads, capacity, head_dim]`, the chunk's keys/values already appended), 4 out f32
/// (read-write). Query t (position `pos + t`) attends causally to positions
/// `[0, min(seq_len + t, capacity))`; its q is at float `t * q_stride + h * head_dim`, its
/// output at `t * o_stride + h * head_dim`. Dispatch [`attention_prefill_groups`] with
/// the kernel's queries per workgroup ([`attention_prefill_kernel`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct AttnPrefillPush {
    /// Query heads.
    pub heads: u32,
    /// Key/value heads (divides `heads`).
    pub kv_heads: u32,
    /// Head dimension (even, <= 256).
    pub head_dim: u32,
    /// KV-cache capacity in positions.
    pub capacity: u32,
    /// Tokens in the chunk.
    pub tokens: u32,
    /// Floats between consecutive tokens' q (usually `heads * head_dim`).
    pub q_stride: u32,
    /// Floats between consecutive tokens' output (usually `heads * head_dim`).
    pub o_stride: u32,
    /// Score scale, usually `1 / sqrt(head_dim)`.
    pub scale: f32,
}
const _: () = assert!(
    std::mem::size_of::<AttnPrefillPush>() == crate::ATTENTION_PREFILL.push_constant_bytes as usize
        && std::mem::size_of::<AttnPrefillPush>()
            == crate::ATTENTION_PREFILL_CM.push_constant_bytes as usize
        && std::mem::size_of::<AttnPrefillPush>()
            == crate::ATTENTION_PREFILL_CM64.push_constant_bytes as usize
);

/// Queries per workgroup of [`crate::ATTENTION_PREFILL`].
pub const ATTENTION_PREFILL_QUERIES: u32 = 16;

/// Dispatch size of a prefill attention kernel taking `queries` per workgroup
/// ([`attention_prefill_kernel`]): `[ceil(tokens / queries), heads, 1]`.
pub fn attention_prefill_groups(queries: u32, tokens: u32, heads: u32) -> [u32; 3] {
    [tokens.div_ceil(queries.max(1)).max(1), heads, 1]
}

/// Queries per workgroup of [`crate::ATTENTION_PREFILL_CM`] and
/// [`crate::ATTENTION_PREFILL_CM64`].
pub const ATTENTION_PREFILL_CM_QUERIES: u32 = 64;

/// The prefill attention for `head_dim` and how many queries a workgroup of it takes: on
/// the matrix units where `coopmat` (the device's `coopmat_f16_16x16`) and heads have 128
/// dims ([`crate::ATTENTION_PREFILL_CM`]) or 64 ([`crate::ATTENTION_PREFILL_CM64`]), else
/// [`crate::ATTENTION_PREFILL`]. All take the same bindings and [`AttnPrefillPush`];
/// dispatch [`attention_prefill_groups`].
pub fn attention_prefill_kernel(head_dim: u32, coopmat: bool) -> (&'static crate::KernelDesc, u32) {
    match (coopmat, head_dim) {
        (true, 128) => (&crate::ATTENTION_PREFILL_CM, ATTENTION_PREFILL_CM_QUERIES),
        (true, 64) => (&crate::ATTENTION_PREFILL_CM64, ATTENTION_PREFILL_CM_QUERIES),
        _ => (&crate::ATTENTION_PREFILL, ATTENTION_PREFILL_QUERIES),
    }
}

/// CPU reference of [`crate::ATTENTION_PREFILL`] (f64 softmax): `q` tokens x `q_stride`,
/// caches as f32 `[kv_heads, capacity, head_dim]`, `seq_len` of the first token; returns
/// `tokens * o_stride` floats (zero where nothing is written).
pub fn attention_prefill_cpu(
    p: &AttnPrefillPush,
    seq_len: u32,
    q: &[f32],
    kcache: &[f32],
    vcache: &[f32],
) -> Vec<f32> {
    let hd = p.head_dim as usize;
    let mut out = vec![0.0f32; p.tokens as usize * p.o_stride as usize];
    let group = (p.heads / p.kv_heads) as usize;
    for t in 0..p.tokens as usize {
        let seq = (seq_len as usize + t).min(p.capacity as usize);
        for h in 0..p.heads as usize {
            let qh = &q[t * p.q_stride as usize + h * hd..][..hd];
            let base = (h / group) * p.capacity as usize * hd;
            let scores: Vec<f64> = (0..seq)
                .map(|s| {
                    let k = &kcache[base + s * hd..][..hd];
                    qh.iter()
                        .zip(k)
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum::<f64>()
                        * p.scale as f64
                })
                .collect();
            let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - mx).exp()).collect();
            let sum: f64 = e.iter().sum();
            for d in 0..hd {
                let v: f64 = (0..seq)
                    .map(|s| e[s] * vcache[base + s * hd + d] as f64)
                    .sum();
                out[t * p.o_stride as usize + h * hd + d] = (v / sum) as f32;
            }
        }
    }
    out
}

/// Checks the cooperative-matrix kernels on this device against the portable ones
/// (plain and RMSNorm + gate/up + SiLU, f16 weights, odd sizes, three rounds): true when
/// the device has them and every result agrees (NMSE <= 1e-4); false without matrix
/// units or on any disagreement. Call once after making the device and pass the answer
/// as `coopmat` to [`matmul`] / [`matmul_groups`]: a driver whose matrix path misbehaves
/// then costs speed, not correctness.
pub fn coopmat_self_test(device: &sluice::Device) -> sluice::Result<bool> {
    use sluice::ResourceClass;
    if !device.info().coopmat_f16_16x16 {
        return Ok(false);
    }
    let (tokens, rows, cols) = (77u32, 200u32, 300u32);
    let (t, r, c) = (tokens as usize, rows as usize, cols as usize);
    // Deterministic values in [-1, 1).
    let mut state = 0x2545_f491_u32;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        (state >> 8) as f32 / (1u32 << 23) as f32 - 1.0
    };
    let mut vals = |n: usize| (0..n).map(|_| next()).collect::<Vec<f32>>();
    let wbytes = |v: &[f32]| crate::pack_weights(WeightDtype::F16, r, c, v);
    let upload = |name: &str, bytes: &[u8], class| -> sluice::Result<sluice::Buffer> {
        let b = device.create_buffer(name, bytes.len() as u64, class)?;
        b.write_bytes(0, bytes)?;
        Ok(b)
    };
    let f32_bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let p = MatmulPush {
        eps: 1e-5,
        ..MatmulPush::new(rows, cols, tokens)
    };
    for _round in 0..3 {
        let w = upload(
            "selftest.w",
            &wbytes(&vals(r * c)),
            ResourceClass::ReadOnlyWeight,
        )?;
        let wb = upload(
            "selftest.w_b",
            &wbytes(&vals(r * c)),
            ResourceClass::ReadOnlyWeight,
        )?;
        let nw = upload(
            "selftest.norm",
            &f32_bytes(&vals(c)),
            ResourceClass::ReadOnlyWeight,
        )?;
        let x = upload(
            "selftest.x",
            &f32_bytes(&vals(t * p.x_stride as usize)),
            ResourceClass::TokenScratch,
        )?;
        for variant in [MatmulVariant::Plain, MatmulVariant::SiluNorm] {
            let mut out = Vec::new();
            for coop in [false, true] {
                let y = device.create_buffer(
                    "selftest.y",
                    (t * r * 4) as u64,
                    ResourceClass::TokenScratch,
                )?;
                let k = device.pipeline(matmul(WeightDtype::F16, variant, coop))?;
                let slices = match variant {
                    MatmulVariant::Plain => vec![w.slice(..), x.slice(..), y.slice(..)],
                    _ => vec![
                        w.slice(..),
                        wb.slice(..),
                        x.slice(..),
                        nw.slice(..),
                        y.slice(..),
                    ],
                };
                let mut enc = device.encoder()?;
                enc.dispatch(&k, matmul_groups(rows, tokens, coop), &slices, &p)?;
                enc.submit()?.wait()?;
                out.push(y.read::<f32>(0, t * r)?);
            }
            let (mut num, mut den) = (0f64, 0f64);
            for (a, b) in out[0].iter().zip(&out[1]) {
                num += (*a as f64 - *b as f64).powi(2);
                den += (*a as f64).powi(2);
            }
            if num.is_nan() || num > 1e-4 * den {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Push constants of `mma_i8_probe`, the int8 matrix-unit probe (C = A . B on 16 x 16 x 32
/// s8 cooperative matrices; docs/decisions/0008-int8-matrix-units.md), and of
/// `mma_i8_scale_probe` (the same product scaled per row and column in registers; modes 0
/// and 1 only). Run only where `DeviceInfo::coopmat_s8_16x16x32` holds. Dispatch
/// `[m / 16, n / 16, 1]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MmaI8ProbePush {
    /// Rows of A and C (a multiple of 16).
    pub m: u32,
    /// Columns of B and C (a multiple of 16).
    pub n: u32,
    /// Columns of A, rows of B (a multiple of 32).
    pub k: u32,
    /// 0: C = A . B over all of K. 1 (speed): the first 32 of K multiplied `reps` times
    /// into four accumulators, C = 4 reps A[:, ..32] . B[..32, :]. 2, 3, 4 (speed only,
    /// C meaningless): as 1 with A and B loaded from shared memory before each step (16-
    /// or 4-byte elements; 4: 16-byte and a product stored each step).
    pub mode: u32,
    /// Repetitions of modes 1-4.
    pub reps: u32,
}
const _: () = assert!(
    std::mem::size_of::<MmaI8ProbePush>() == crate::MMA_I8_PROBE.push_constant_bytes as usize
);
const _: () = assert!(
    std::mem::size_of::<MmaI8ProbePush>() == crate::MMA_I8_SCALE_PROBE.push_constant_bytes as usize
);

/// Push constants of `coop_load_probe` (a speed probe of f16 matrix products with operands
/// reloaded from shared memory in several layouts; see the kernel). Runs only where
/// `DeviceInfo::coopmat_f16_16x16` holds. Dispatch `[groups, 1, 1]`, binding 0 at least
/// 1 KiB per group.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct CoopLoadProbePush {
    /// 0: operands in registers; 1-5: reloaded each step (the kernel lists the layouts).
    pub mode: u32,
    /// Steps of four products.
    pub reps: u32,
}
const _: () = assert!(
    std::mem::size_of::<CoopLoadProbePush>() == crate::COOP_LOAD_PROBE.push_constant_bytes as usize
);
