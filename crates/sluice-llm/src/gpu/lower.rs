//! The step described in [`crate::layer`] lowered to dispatches. One walk over the ops
//! serves every [`Shape`]: decode (one token) and prefill (a chunk of tokens, token index
//! in a workgroup dimension). The fusion switches of [`super::GpuOptions`] mean the same
//! in both: a norm folded into the linear op that consumes it, gate/up + SiLU in one
//! kernel, and (decode only, see `fuse_attention`) q/k norm + RoPE + KV append folded into
//! attention.

use sluice::{Buffer, BufferSlice, Encoder};
use sluice_kernels as k;

use super::layout::{qkv_offsets, qkv_rows, Matrix};
use super::{GpuModel, Qkv};
use crate::config::ModelConfig;
use crate::layer::{self, Act, LayerTensor as T, Linear, Norm, Op, Weight};

/// What one recorded step covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// One token at `params.pos`.
    Decode,
    /// The `n` prompt tokens held by the params buffer, at positions `params.pos..`.
    Prefill(u32),
    /// `n` rows of any sequences over the paged KV cache (see [`super::paged`]): each row
    /// is a token at its own position of its own sequence; every row gets logits and an
    /// argmax. Projections use kernels whose per-row reduction order does not depend on
    /// the row count (`matvec_batch`; block formats: `matvec_batch_dp`, or the matrix
    /// units in large engines), so a row's result never depends on the batch around it.
    Batch(u32),
    /// Like [`Shape::Batch`], but only the last row gets logits (a prompt chunk of one
    /// sequence).
    BatchPrefill(u32),
}

impl Shape {
    /// Tokens the step covers.
    pub fn tokens(self) -> u32 {
        match self {
            Shape::Decode => 1,
            Shape::Prefill(n) | Shape::Batch(n) | Shape::BatchPrefill(n) => n,
        }
    }

    /// More than one token per dispatch (token index in a workgroup dimension).
    pub(super) fn batched(self) -> bool {
        !matches!(self, Shape::Decode)
    }

    /// Rows over the paged KV cache.
    pub(super) fn paged(self) -> bool {
        matches!(self, Shape::Batch(_) | Shape::BatchPrefill(_))
    }
}

/// Which member of the matvec family a dispatch uses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    Plain,
    Norm,
    Silu,
    SiluNorm,
}

/// The kernels a linear op of a paged shape runs on ([`GpuModel::batch_path`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BatchPath {
    /// `act_q8` then `matvec_batch_dp` (block formats, decode rows).
    IntDot,
    /// `act_f16` (unless the producer wrote f16, [`GpuModel::f16_input`]) then the
    /// cooperative-matrix matvecs.
    MatrixUnits,
    /// The matvec / matmul families.
    Other,
}

/// One matrix of a batched linear op and where its rows go: y's buffer, the float of a
/// token's row it writes first, floats per row, and its run (its region of the staged
/// kernels' scratch, [`GpuModel::batch_cmt_run`]).
struct BatchPart<'a> {
    m: &'a Matrix,
    y: &'a Buffer,
    row: u64,
    y_stride: u32,
    run: u64,
}

/// A decode matvec's part in the quantized handoff ([`GpuModel::q8_handoff`]).
#[derive(Clone, Copy)]
enum Q8Io {
    Off,
    /// Also write y's q8 records from this float offset of the y binding, with this
    /// `threads_per_row` field (workgroups of whole 32-row blocks).
    Produce(u32, u32),
    /// x is q8 records (`matvec_xq8`).
    Consume,
}

/// Per-token layout of a dispatch over several tokens: strides of x (vec4s) and y
/// (floats), and the token count (workgroup z).
#[derive(Clone, Copy)]
struct Tokens {
    n: u32,
    x_stride4: u32,
    y_stride: u32,
    /// Matrix-matrix kernels even for one token (batch invariance of paged shapes).
    matmul: bool,
    /// Rows of a batched decode step: the batched matvec family where the weight format
    /// has one (else `matmul`).
    batch_rows: bool,
    /// A single sequence's prefill chunk ([`Shape::Prefill`]): kernels may be chosen by
    /// the token count (no batch to be invariant to).
    prefill: bool,
}

impl GpuModel {
    /// Records the step for `shape` from the layer description (decode layers as
    /// persistent dispatches with `persistent`, see [`super::Lowering`]).
    pub(super) fn encode_lowered(
        &self,
        enc: &mut Encoder,
        shape: Shape,
        persistent: bool,
    ) -> sluice::Result<()> {
        let ops = layer::forward(self.config.layers);
        let persistent = persistent && shape == Shape::Decode;
        // Runs of ops of one decoder layer (consecutive in the description), and single
        // ops outside the layers.
        for run in ops.chunk_by(|a, b| a.layer().is_some() && a.layer() == b.layer()) {
            // Persistent lowering: a layer's ops in one dispatch (where its format has a
            // persistent kernel; other layers keep the barriers).
            if let Some(i) = run[0]
                .layer()
                .filter(|&i| persistent && self.layer_is_persistent(i))
            {
                self.lower_layer_persistent(enc, i, run)?;
                continue;
            }
            for &op in run {
                match op {
                    Op::Embed => self.lower_embed(enc, shape)?,
                    Op::Linear(l) => self.lower_linear(enc, &l, shape)?,
                    Op::Attention(i) => self.lower_attention(enc, i, shape)?,
                    Op::Next => self.lower_next(enc, shape)?,
                }
            }
        }
        Ok(())
    }

    /// Records the step for `shape` with the barrier lowering.
    pub(super) fn encode(&self, enc: &mut Encoder, shape: Shape) -> sluice::Result<()> {
        self.encode_lowered(enc, shape, false)
    }

    pub(super) fn label(&self, enc: &mut Encoder, shape: Shape, op: &str, layer: Option<usize>) {
        let prefix = match shape {
            Shape::Decode => "",
            Shape::Prefill(_) => "prefill.",
            Shape::Batch(_) | Shape::BatchPrefill(_) => "batch.",
        };
        match layer {
            Some(i) => enc.set_label(&format!("{prefix}{op} L{i}")),
            None => enc.set_label(&format!("{prefix}{op}")),
        }
    }

    /// An activation's buffer and its floats per token (a batch's logits: every row's).
    fn act(&self, a: Act, shape: Shape) -> (&Buffer, u32) {
        if let (Act::Logits, Shape::Batch(_)) = (a, shape) {
            return (self.paged_logits(), self.config.vocab as u32);
        }
        let s = &self.scratch;
        let z = &self.sizes;
        match a {
            Act::X => (&s.x, z.x_stride as u32),
            Act::Qkv => (&s.qkv, qkv_rows(&self.config) as u32),
            Act::Attn => (&s.attn, z.attn_stride as u32),
            Act::H => (&s.h, z.h_stride as u32),
            Act::Logits => (&self.logits, self.config.vocab as u32),
        }
    }

    /// The matrices of a weight with the first output row each writes.
    fn matrices(&self, w: Weight) -> Vec<(&Matrix, u64)> {
        match w {
            Weight::Qkv(i) => match &self.layers[i].qkv {
                Qkv::Stacked(m) => vec![(m, 0)],
                Qkv::Split(ms) => ms.iter().map(|(m, first)| (m, *first)).collect(),
            },
            Weight::Layer(i, t) => {
                let l = &self.layers[i];
                let m = match t {
                    T::O => &l.o,
                    T::Gate => &l.gate,
                    T::Up => &l.up,
                    T::Down => &l.down,
                    other => unreachable!("{other:?} is not a single projection"),
                };
                vec![(m, 0)]
            }
            Weight::Head => self.head().parts.iter().map(|(m, r)| (m, *r)).collect(),
        }
    }

    fn norm_weight(&self, n: Norm) -> &Buffer {
        match n {
            Norm::Layer(i, T::MlpNorm) => &self.layers[i].mlp_norm,
            Norm::Layer(i, _) => &self.layers[i].attn_norm,
            Norm::Final => &self.final_norm,
        }
    }

    fn lower_embed(&self, enc: &mut Encoder, shape: Shape) -> sluice::Result<()> {
        let h = self.config.hidden as u32;
        self.label(enc, shape, "embed", None);
        let params = if shape.paged() {
            self.paged_tokens()
        } else {
            &self.params
        };
        let dt = self.embed.dtype();
        let mut groups = k::embed_groups_dt(dt, h);
        groups[1] = shape.tokens();
        let pipeline = self.device.pipeline(k::embed(dt))?;
        let x_stride = if shape.batched() {
            self.sizes.x_stride as u32
        } else {
            0
        };
        let push = k::embed_push(dt, h, shape.batched(), x_stride);
        // One dispatch per part of a table split over bindings, each writing its tokens.
        let parts = &self.embed.parts;
        for (i, (m, first)) in parts.iter().enumerate() {
            let first = u32::try_from(*first).map_err(|_| {
                sluice::Error::InvalidUse(format!("embedding part from row {first}"))
            })?;
            enc.dispatch(
                &pipeline,
                groups,
                &[params.slice(..), m.slice(), self.scratch.x.slice(..)],
                &push.part(first, i + 1 == parts.len()),
            )?;
        }
        Ok(())
    }

    /// One matvec-family dispatch: `m` (and `up` for the gated ones) over `x` into `y`;
    /// `tokens` for the token-batched variants.
    #[allow(clippy::too_many_arguments)]
    fn matvec(
        &self,
        enc: &mut Encoder,
        family: Family,
        m: &Matrix,
        up: Option<&Matrix>,
        x: BufferSlice<'_>,
        norm: Option<&Buffer>,
        y: BufferSlice<'_>,
        accumulate: bool,
        tokens: Option<Tokens>,
        q8: Q8Io,
    ) -> sluice::Result<()> {
        let dt = m.dtype;
        let silu = matches!(family, Family::Silu | Family::SiluNorm);
        let eps = if norm.is_some() {
            self.config.rms_eps
        } else {
            0.0
        };
        // Every member of the family binds: w, [w_b], x, [norm_w], y.
        let mut bindings = vec![m.slice()];
        bindings.extend(up.map(|u| u.slice()));
        bindings.push(x);
        bindings.extend(norm.map(|n| n.slice(..)));
        bindings.push(y);
        if let Some(t) = tokens.filter(|t| t.batch_rows) {
            if let Some(desc) = k::matvec_batch(dt, norm.is_some(), silu) {
                let lay = k::matvec_batch_layout(m.rows, t.n);
                let push = k::MatvecBatchPush {
                    rows: m.rows,
                    cols: m.cols,
                    stride8: m.stride_field(),
                    accumulate: accumulate as u32,
                    eps,
                    tokens: t.n,
                    x_stride4: t.x_stride4,
                    y_stride: t.y_stride,
                    tokens_per_wg: lay.tokens_per_wg,
                    row_groups_y: lay.row_groups_y,
                };
                return enc.dispatch(&self.device.pipeline(desc)?, lay.groups, &bindings, &push);
            }
            // Block formats: the decode kernels with one workgroup column per row of the
            // batch (the `*_tokens` family), so each row reduces exactly as a single
            // token does, whatever the row count.
        } else if let Some(t) = tokens.filter(|t| t.n > 1 || t.matmul) {
            return self.matmul(enc, family, m, &bindings, accumulate, t);
        }
        let stem = match (family, tokens.is_some()) {
            (Family::Plain, false) => "matvec",
            (Family::Norm, false) => "matvec_norm",
            (Family::Silu, false) => "matvec_silu",
            (Family::SiluNorm, false) => "matvec_silu_norm",
            (Family::Plain, true) => "matvec_tokens",
            (Family::Norm, true) => "matvec_norm_tokens",
            (Family::Silu, true) => "matvec_silu_tokens",
            (Family::SiluNorm, true) => "matvec_silu_norm_tokens",
        };
        let int_dot = self.device.info().int_dot;
        let mut desc = match q8 {
            Q8Io::Consume => k::matvec_xq8(dt),
            _ => k::matvec_kernel(stem, dt, int_dot),
        }
        .unwrap_or_else(|| unreachable!("matvec family kernel {stem} has no {dt:?} variant"));
        let tpr = match q8 {
            Q8Io::Produce(_, field) => Some(field),
            _ => self.options.matvec_threads_per_row,
        };
        let mut push = m.push(accumulate, eps, tpr);
        let mut groups = m.groups(tpr);
        // The LM head: as many workgroups as stay resident, each over several blocks of
        // rows.
        if let (Family::Norm, None, Q8Io::Off) = (family, tokens, q8) {
            let info = self.device.info();
            let (cu, sg) = (info.compute_units, info.subgroup_size);
            if let Some(plan) = k::matvec_norm_head_plan(dt, m.cols, groups, int_dot, cu, sg) {
                (desc, groups) = (plan.kernel, plan.groups);
                plan.set_threads_per_row(&mut push, tpr);
            }
        }
        if let Q8Io::Produce(at, _) = q8 {
            push.q8_at = at;
        }
        if let Some(t) = tokens {
            push.x_stride4 = t.x_stride4;
            push.y_stride = t.y_stride;
            groups[2] = t.n;
        }
        enc.dispatch(&self.device.pipeline(desc)?, groups, &bindings, &push)
    }

    /// The matrix-matrix form of [`Self::matvec`] for a chunk of tokens (same bindings):
    /// the weights are read once per tile of tokens (on matrix units where the device has
    /// them).
    fn matmul(
        &self,
        enc: &mut Encoder,
        family: Family,
        m: &Matrix,
        bindings: &[BufferSlice<'_>],
        accumulate: bool,
        t: Tokens,
    ) -> sluice::Result<()> {
        let variant = match family {
            Family::Plain => k::MatmulVariant::Plain,
            Family::Norm => k::MatmulVariant::Norm,
            Family::Silu => k::MatmulVariant::Silu,
            Family::SiluNorm => k::MatmulVariant::SiluNorm,
        };
        let mut push = k::MatmulPush::for_dtype(m.dtype, m.rows, m.cols, t.n);
        push.x_stride = t.x_stride4 * 4;
        push.y_stride = t.y_stride;
        push.accumulate = accumulate as u32;
        if matches!(family, Family::Norm | Family::SiluNorm) {
            push.eps = self.config.rms_eps;
        }
        let desc = k::matmul(m.dtype, variant, self.coopmat);
        enc.dispatch(
            &self.device.pipeline(desc)?,
            k::matmul_groups(m.rows, t.n, self.coopmat),
            bindings,
            &push,
        )
    }

    /// A batched step's linear op on the matrix units: the activations `x` to f16 (norm
    /// applied) once (`None`: the producer wrote them into `xh`), then one
    /// cooperative-matrix matvec per matrix (`up`: gated; f16 weights or block formats
    /// decoded in the kernel), y written as `y_mode` says (`sluice_kernels::Y_STORE`, ...).
    #[allow(clippy::too_many_arguments)]
    fn batch_cm(
        &self,
        enc: &mut Encoder,
        t: Tokens,
        x: Option<(BufferSlice<'_>, u32)>,
        norm: Option<&Buffer>,
        xh: &Buffer,
        parts: &[BatchPart<'_>],
        up: Option<&Matrix>,
        y_mode: u32,
    ) -> sluice::Result<()> {
        let cols = parts[0].m.cols;
        let padded = t.n.next_multiple_of(16);
        let h_bytes = padded as u64 * cols as u64 * 2;
        if let Some(x) = x {
            enc.dispatch(
                &self.device.pipeline(&k::ACT_F16)?,
                [padded, 1, 1],
                &[
                    x.0,
                    norm.unwrap_or(&self.final_norm).slice(..),
                    xh.slice(0..h_bytes),
                ],
                &k::ActF16Push {
                    cols,
                    tokens: t.n,
                    x_stride: x.1,
                    h_words: cols / 2,
                    norm: norm.is_some() as u32,
                    eps: self.config.rms_eps,
                },
            )?;
        }
        let gated = up.is_some();
        for p in parts {
            let m = p.m;
            let mut bindings = vec![m.slice()];
            bindings.extend(up.map(|u| u.slice()));
            bindings.extend([xh.slice(0..h_bytes), p.y.slice(p.row * 4..)]);
            let (push, groups) = k::MatvecBatchCmPush::new(m.dtype, m.rows, cols, t.n);
            let push = k::MatvecBatchCmPush {
                y_stride: p.y_stride,
                y_mode,
                ..push
            };
            // f16 matrices with K whole (the same bindings and push constants, no scratch): a
            // single sequence's prefill chunk's where their 128 x 128 tiles fill the GPU as
            // tiled matmuls (decision 0017); else the LM heads, and a prefill chunk's other
            // f16 matrices where its tokens fill the GPU, on the register-built matvecs
            // (decision 0014).
            let tile = if self.tiled && t.prefill {
                k::matmul_tile_prefill(m.dtype, m.rows, cols, t.n, gated, y_mode)
                    .map(|desc| (desc, k::matmul_tile_groups(m.rows, t.n, gated)))
            } else {
                None
            };
            let whole = tile.or_else(|| {
                let cmd = if !self.cmd_layout {
                    None
                } else if t.prefill {
                    k::matvec_batch_cmd_prefill(m.dtype, m.rows, cols, t.n, gated, y_mode)
                } else {
                    k::matvec_batch_cmd_fits(m.dtype, m.rows, cols, gated, y_mode)
                        .then_some((&k::MATVEC_BATCH_CMD_F16, k::MATVEC_BATCH_CMD_TOKENS))
                };
                cmd.map(|(desc, per_group)| {
                    let groups = k::matvec_batch_cmd_groups(per_group, m.rows, t.n, gated);
                    (desc, groups)
                })
            });
            if let Some((desc, (groups, gy))) = whole {
                let push = k::MatvecBatchCmPush {
                    row_groups_x: gy,
                    ..push
                };
                log::trace!(
                    "{}x{cols} f16 at {} tokens, K whole: {} {groups:?}",
                    m.rows,
                    t.n,
                    desc.name
                );
                enc.dispatch(&self.device.pipeline(desc)?, groups, &bindings, &push)?;
                continue;
            }
            // Operands staged through shared memory, K split over workgroups for matrices
            // of few rows (matvec_batch_cmt, or matvec_batch_cmr for large matrices): every
            // projection but the f16 gate/ups under `cmr_min_weights`, which measured no
            // faster on matvec_batch_cmt than on matvec_batch_cm_silu (-2% to +3% on the
            // engine; BENCHMARKS.md, fifth session).
            // Q4_K and Q6_K: the weights' operands built in registers, K split as the staged
            // kernels (decision 0014); a single sequence's prefill chunk keeps K whole where
            // its token groups fill the GPU (decision 0017).
            let lay = if self.cmd_layout && k::matvec_batch_cmdq_fits(m.dtype, m.rows, cols, gated)
            {
                if t.prefill {
                    k::matvec_batch_cmdq_prefill_layout(m.rows, cols, t.n, gated)
                } else {
                    k::matvec_batch_staged_layout(
                        k::StagedShape::Registers,
                        m.rows,
                        cols,
                        t.n,
                        gated,
                    )
                }
            } else if self.cmd_layout && k::matvec_batch_cmdk_f16_fits(m.dtype, m.rows, cols) {
                // f16: the same with stages of 128 columns (decision 0014).
                k::matvec_batch_staged_layout(
                    k::StagedShape::RegistersF16,
                    m.rows,
                    cols,
                    t.n,
                    gated,
                )
            } else {
                k::matvec_batch_cmt_layout(m.dtype, m.rows, cols, t.n, gated)
            };
            // Decode steps and prefill chunks on the kernels that take both forms (decision
            // 0019), a gate/up pair where the two share a buffer and the device binds the
            // pair's bytes as one range.
            let max_range = self.device.info().max_storage_range;
            let up_at = up
                .filter(|u| m.through_bytes(u) <= max_range)
                .and_then(|u| m.up_at(u));
            let lay = k::MatvecBatchCmtLayout {
                both: up.is_none() || up_at.is_some(),
                ..lay
            };
            // This run's scratch region (sized for any shape), as much as the shape uses.
            let part_bytes = (lay.part_floats * 4).max(4);
            let scratch = self.batch_cmt_run(p.run, part_bytes, lay.tickets * 4);
            let staged = scratch.filter(|_| {
                k::matvec_batch_cmt_fits(m.dtype, m.rows, cols)
                    && (m.dtype.is_quantized()
                        || !gated
                        || matches!(
                            lay.shape,
                            k::StagedShape::Rows | k::StagedShape::RegistersF16
                        ))
            });
            let no_kernel = |what: &str| {
                sluice::Error::InvalidUse(format!(
                    "no {what} batched matvec for {} weights",
                    m.dtype.name()
                ))
            };
            if let Some((part, tick)) = staged {
                let desc = lay
                    .kernel(m.dtype, gated)
                    .ok_or_else(|| no_kernel("staged"))?;
                let mut push = push.staged(&lay);
                if let (true, Some(u), Some(at)) = (lay.both_forms(m.dtype), up, up_at) {
                    // One kernel for plain and gated matrices: gate and up as one range,
                    // the up at vec4 `at` of it.
                    bindings.splice(0..2, [m.through(u)]);
                    push = push.with_up_at(at);
                }
                bindings.extend([part, tick]);
                let pipeline = self.device.pipeline(desc)?;
                log::trace!(
                    "batched {}x{cols} {} at {} tokens: {} {:?}",
                    m.rows,
                    m.dtype.name(),
                    t.n,
                    desc.name,
                    lay.groups
                );
                enc.dispatch(&pipeline, lay.groups, &bindings, &push)?;
                continue;
            }
            let desc = k::matvec_batch_cm(m.dtype, gated, m.rows)
                .ok_or_else(|| no_kernel("cooperative-matrix"))?;
            log::trace!(
                "batched {}x{cols} {} at {} tokens: {}",
                m.rows,
                m.dtype.name(),
                t.n,
                desc.name
            );
            enc.dispatch(&self.device.pipeline(desc)?, groups, &bindings, &push)?;
        }
        Ok(())
    }

    /// A batched step's linear op on integer dot products (block formats): the
    /// activations quantized to int8 per 32 (norm applied) once (`x`; `None`: its producer
    /// already wrote them to `dp`), then one `matvec_batch_dp` per matrix (`up`: gated).
    #[allow(clippy::too_many_arguments)]
    fn batch_dp(
        &self,
        enc: &mut Encoder,
        t: Tokens,
        x: Option<(BufferSlice<'_>, u32)>,
        norm: Option<&Buffer>,
        dp: &(Buffer, Buffer),
        parts: &[BatchPart<'_>],
        up: Option<&Matrix>,
        accumulate: bool,
        q8_out: Option<&(Buffer, Buffer)>,
    ) -> sluice::Result<()> {
        let cols = parts[0].m.cols;
        let (qs, ds) = k::act_q8_strides(cols);
        let xq = dp.0.slice(0..t.n as u64 * qs as u64 * 4);
        let xd = dp.1.slice(0..t.n as u64 * ds as u64 * 16);
        // x quantized here, unless its producer wrote it so (`None`).
        if let Some(x) = x {
            enc.dispatch(
                &self.device.pipeline(&k::ACT_Q8)?,
                [t.n, 1, 1],
                &[x.0, norm.unwrap_or(&self.final_norm).slice(..), xq, xd],
                &k::ActQ8Push {
                    cols,
                    tokens: t.n,
                    x_stride4: x.1 / 4,
                    norm: norm.is_some() as u32,
                    eps: self.config.rms_eps,
                    xq_stride: qs,
                    xd_stride: ds,
                },
            )?;
        }
        for p in parts {
            let m = p.m;
            let desc = k::matvec_batch_dp(m.dtype, up.is_some()).ok_or_else(|| {
                sluice::Error::InvalidUse(format!(
                    "no integer-dot batched matvec for {} weights",
                    m.dtype.name()
                ))
            })?;
            let plan = q8_out
                .and_then(|_| k::matvec_batch_dp_q8_plan(m.dtype, m.rows, cols))
                .unwrap_or_else(|| k::matvec_batch_dp_plan(m.dtype, m.rows, cols));
            let (push, groups) = k::MatvecBatchDpPush::with_plan(m.dtype, m.rows, cols, t.n, plan);
            let (hq, hd) = k::act_q8_strides(m.rows);
            let push = k::MatvecBatchDpPush {
                w_stride: m.stride_field(),
                y_stride: p.y_stride,
                accumulate: accumulate as u32,
                q8: q8_out.is_some() as u32,
                q8_words: hq,
                q8_blocks: hd,
                ..push
            };
            let mut bindings = vec![m.slice()];
            bindings.extend(up.map(|u| u.slice()));
            bindings.extend([xq, xd, p.y.slice(p.row * 4..)]);
            if up.is_some() {
                // The int8 output (any buffer without it).
                bindings.extend(match q8_out {
                    Some((q, d)) => [q.slice(..), d.slice(..)],
                    None => [p.y.slice(..), p.y.slice(..)],
                });
            }
            enc.dispatch(&self.device.pipeline(desc)?, groups, &bindings, &push)?;
        }
        Ok(())
    }

    fn rmsnorm(
        &self,
        enc: &mut Encoder,
        x: (&Buffer, u32),
        w: &Buffer,
        n: u32,
        rows: u32,
        first_row: u32,
    ) -> sluice::Result<()> {
        let (buf, stride) = x;
        let off = first_row as u64 * stride as u64 * 4;
        let bytes = ((rows - 1) as u64 * stride as u64 + n as u64) * 4;
        let xn_bytes = bytes.max(n.next_multiple_of(8) as u64 * 4);
        enc.dispatch(
            &self.kernels.rmsnorm,
            [rows, 1, 1],
            &[
                buf.slice(off..off + bytes),
                w.slice(..),
                self.scratch.xn.slice(0..xn_bytes),
            ],
            &k::RmsNormPush {
                n,
                rows,
                eps: self.config.rms_eps,
                stride,
            },
        )
    }

    /// The kernels linear op `l` of a paged `shape` runs on. Decode rows of block-format
    /// weights on integer dot products where the device has them (and the engine is not
    /// one that runs them on the matrix units, see `PagedOptions`): each weight unit loaded
    /// once for every row (gated: gate and up of one format). Else the matrix units where
    /// the weights fit (block formats: prompt chunks, and the decode rows of those
    /// engines).
    fn batch_path(&self, l: &Linear, shape: Shape) -> BatchPath {
        // A single sequence's prefill chunk: the matrix units with the option, every format.
        let prefill_mu = matches!(shape, Shape::Prefill(_)) && self.options.prefill_matrix_units;
        if !shape.paged() && !prefill_mu {
            return BatchPath::Other;
        }
        let parts = self.matrices(l.weight);
        let up = l.up.map(|u| self.matrices(u)[0].0);
        let rows_cm = self.batch_xh().is_some() && self.block_rows_on_matrix_units();
        let decode_rows = matches!(shape, Shape::Batch(_));
        if decode_rows && !rows_cm && self.batch_dp_scratch().is_some() {
            let ok = |m: &Matrix| k::matvec_batch_dp(m.dtype, false).is_some();
            let gated_ok = up
                .is_none_or(|u| ok(u) && u.dtype == parts[0].0.dtype && self.options.fuse_gate_up);
            if gated_ok && parts.iter().all(|(m, _)| ok(m)) {
                return BatchPath::IntDot;
            }
        }
        if self.batch_xh().is_some() {
            let block_cm = !decode_rows || rows_cm;
            let fits = |m: &Matrix| {
                k::matvec_batch_cm_fits(m.dtype, m.rows, m.cols)
                    && (!m.dtype.is_quantized() || block_cm)
            };
            let gated_ok = up.is_none_or(|u| {
                fits(u) && u.dtype == parts[0].0.dtype && self.options.fuse_gate_up
            });
            if gated_ok && parts.iter().all(|(m, _)| fits(m)) {
                return BatchPath::MatrixUnits;
            }
        }
        BatchPath::Other
    }

    /// Where linear op `l` of a paged `shape` or a prefill chunk finds its input already as
    /// f16, written there by its producer (then the producer writes f16 pairs, bit for bit
    /// what `act_f16` would make of its f32 output, and the `act_f16` dispatch goes): an op
    /// on the matrix units without a norm whose input is the batched attention's output
    /// (the batch's `xh`; a prefill chunk's attention writes f32) or the MLP hidden state of
    /// a gate/up op on the matrix units (`xh_mlp`: the gate/up reads `xh`).
    pub(super) fn f16_input(&self, l: &Linear, shape: Shape) -> Option<&Buffer> {
        if l.norm.is_some() || self.batch_path(l, shape) != BatchPath::MatrixUnits {
            return None;
        }
        let layer = l.weight.layer()?;
        match l.input {
            Act::Attn if shape.paged() => self.batch_xh(),
            Act::H => {
                let producer = layer_linear(layer, |p| p.output == Act::H)?;
                let gated_cm = producer.up.is_some()
                    && self.batch_path(&producer, shape) == BatchPath::MatrixUnits;
                gated_cm.then(|| self.batch_xh_mlp()).flatten()
            }
            _ => None,
        }
    }

    /// Where layer `layer`'s batched attention writes its output quantized to int8 per 32
    /// (the integer-dot scratch, what `act_q8` would make of it, so o skips that dispatch):
    /// decode rows whose o runs on integer dot products, with the `q8_handoff` option and
    /// head_dim a multiple of 32.
    pub(super) fn attn_q8_output(&self, layer: usize, shape: Shape) -> Option<&(Buffer, Buffer)> {
        if !self.options.q8_handoff || !self.config.head_dim.is_multiple_of(32) {
            return None;
        }
        let o = layer_linear(layer, |l| l.input == Act::Attn)?;
        if o.norm.is_some() || self.batch_path(&o, shape) != BatchPath::IntDot {
            return None;
        }
        self.batch_dp_scratch()
    }

    /// Where gate/up op `l` writes its output as f16 pairs (and the halves between tokens),
    /// when its consumer reads it so ([`Self::f16_input`]).
    fn f16_output(&self, l: &Linear, shape: Shape) -> Option<(&Buffer, u32)> {
        if l.output != Act::H || l.up.is_none() {
            return None;
        }
        let consumer = layer_linear(l.weight.layer()?, |c| c.input == Act::H)?;
        let cols = self.matrices(consumer.weight)[0].0.cols;
        self.f16_input(&consumer, shape).map(|b| (b, cols))
    }

    /// Where layer `layer`'s decode gate/up hands its output to down quantized (the
    /// `q8_handoff` option): the byte range of the q8 records in the `h` scratch (after the
    /// token's floats; `h` holds a whole prefill chunk) and the gate/up's threads-per-row
    /// field. Only for integer-dot kernels on both sides, a fused gate/up whose workgroups
    /// can own whole blocks of 32 rows (`sluice_kernels::matvec_q8_handoff_tpr`), and the
    /// default threads per row.
    fn q8_handoff(&self, layer: usize, shape: Shape) -> Option<(u64, u64, u32)> {
        let o = &self.options;
        if shape != Shape::Decode
            || !o.q8_handoff
            || !o.fuse_gate_up
            || o.matvec_threads_per_row.is_some()
            || !self.device.info().int_dot
        {
            return None;
        }
        let l = &self.layers[layer];
        let (gate, up, down) = (&l.gate, &l.up, &l.down);
        if gate.dtype != up.dtype || !k::has_int_dot(down.dtype) || down.cols != gate.rows {
            return None;
        }
        let tpr = k::matvec_q8_handoff_tpr(gate.dtype, gate.rows, gate.cols)?;
        let off = (gate.rows as u64 * 4).next_multiple_of(256);
        let end = off + (gate.rows / 32) as u64 * k::Q8_RECORD_FLOATS as u64 * 4;
        (end <= self.scratch.h.size()).then_some((off, end, tpr))
    }

    /// Layers whose decode gate/up hands its output to down quantized (the `q8_handoff`
    /// option; see [`GpuOptions::q8_handoff`](super::GpuOptions::q8_handoff)).
    pub fn q8_handoff_layers(&self) -> usize {
        (0..self.layers.len())
            .filter(|&i| self.q8_handoff(i, Shape::Decode).is_some())
            .count()
    }

    /// Where layer `layer`'s decode attention hands its output to o quantized (the
    /// `q8_handoff` option): the byte range of the q8 records in the `attn` scratch (after
    /// the token's floats). Only for the fused attention of the barrier lowering in models
    /// without q/k/v biases or RoPE scaling (`attention_rope_q8`), an o on integer dot
    /// products where that pays (`sluice_kernels::attn_q8_handoff_pays`), head_dim a
    /// multiple of 32 (each head's workgroup owns whole blocks), and records that fit the
    /// scratch.
    pub(super) fn attn_q8_handoff(&self, layer: usize, shape: Shape) -> Option<(u64, u64)> {
        let o = &self.options;
        if shape != Shape::Decode
            || !o.q8_handoff
            || !o.fuse_attention
            || self.rope_ext()
            || !self.device.info().int_dot
            || !self.config.head_dim.is_multiple_of(32)
        {
            return None;
        }
        let m = &self.layers[layer].o;
        let q_dim = (self.config.heads * self.config.head_dim) as u64;
        if !k::has_int_dot(m.dtype)
            || m.cols as u64 != q_dim
            || !k::attn_q8_handoff_pays(m.dtype, m.rows, m.cols)
        {
            return None;
        }
        let off = (q_dim * 4).next_multiple_of(256);
        let end = off + q_dim / 32 * k::Q8_RECORD_FLOATS as u64 * 4;
        (end <= self.scratch.attn.size()).then_some((off, end))
    }

    /// Layers whose decode attention hands its output to o quantized (see
    /// [`GpuOptions::q8_handoff`](super::GpuOptions::q8_handoff)).
    pub fn attn_q8_handoff_layers(&self) -> usize {
        (0..self.layers.len())
            .filter(|&i| self.attn_q8_handoff(i, Shape::Decode).is_some())
            .count()
    }

    /// Linear ops of a batched decode step (all layers and the LM head) that run on the
    /// matrix units; the others take integer dot products or the matvec family (see
    /// `batch_path`). 0 without a paged engine.
    pub fn batch_matrix_unit_ops(&self) -> usize {
        self.matrix_unit_ops(Shape::Batch(1))
    }

    /// [`Self::batch_matrix_unit_ops`] for a prompt chunk of the paged engine.
    pub fn chunk_matrix_unit_ops(&self) -> usize {
        self.matrix_unit_ops(Shape::BatchPrefill(1))
    }

    /// Linear ops of a paged `shape` that run on the matrix units.
    fn matrix_unit_ops(&self, shape: Shape) -> usize {
        if self.paged_options().is_none() {
            return 0;
        }
        layer::forward(self.layers.len())
            .iter()
            .filter(|op| match op {
                Op::Linear(l) => self.batch_path(l, shape) == BatchPath::MatrixUnits,
                _ => false,
            })
            .count()
    }

    /// Where layer `layer`'s batched gate/up also writes its output quantized to int8 per
    /// 32 for down (the second integer-dot scratch, what `act_q8` would make of it, so down
    /// skips that dispatch): decode rows with both on integer dot products, the
    /// `q8_handoff` option, and a gate/up whose workgroups can own whole blocks of 32 rows
    /// (`sluice_kernels::matvec_batch_dp_q8_plan`).
    pub(super) fn mlp_q8_output(&self, layer: usize, shape: Shape) -> Option<&(Buffer, Buffer)> {
        if !self.options.q8_handoff {
            return None;
        }
        let gate_up = layer_linear(layer, |l| l.output == Act::H && l.up.is_some())?;
        let down = layer_linear(layer, |l| l.input == Act::H)?;
        if down.norm.is_some()
            || self.batch_path(&gate_up, shape) != BatchPath::IntDot
            || self.batch_path(&down, shape) != BatchPath::IntDot
        {
            return None;
        }
        let g = self.matrices(gate_up.weight)[0].0;
        k::matvec_batch_dp_q8_plan(g.dtype, g.rows, g.cols)?;
        self.batch_dp_h_scratch()
    }

    /// Layers whose batched attention hands o its decode rows quantized to int8
    /// ([`Self::attn_q8_output`]; the `q8_handoff` option). 0 without a paged engine.
    pub fn batch_q8_handoff_layers(&self) -> usize {
        (0..self.layers.len())
            .filter(|&i| self.attn_q8_output(i, Shape::Batch(1)).is_some())
            .count()
    }

    /// Layers whose batched gate/up hands down its decode rows quantized to int8
    /// ([`Self::mlp_q8_output`]; the `q8_handoff` option). 0 without a paged engine.
    pub fn batch_mlp_q8_handoff_layers(&self) -> usize {
        (0..self.layers.len())
            .filter(|&i| self.mlp_q8_output(i, Shape::Batch(1)).is_some())
            .count()
    }

    /// The batched kernels' parts of `l` with their outputs: y by default, a split qkv's
    /// later runs their own buffer (`qkv_dest`).
    fn batch_parts<'s>(
        &'s self,
        l: &Linear,
        parts: &[(&'s Matrix, u64)],
        y: (&'s Buffer, u32),
        shape: Shape,
    ) -> Vec<BatchPart<'s>> {
        let parts = parts.iter().zip(0u64..);
        match l.weight {
            Weight::Qkv(i) => parts
                .map(|(&(m, row), run)| {
                    let (y, row, y_stride) = self.qkv_dest(i, row, shape);
                    BatchPart {
                        m,
                        y,
                        row,
                        y_stride,
                        run,
                    }
                })
                .collect(),
            _ => parts
                .map(|(&(m, row), run)| BatchPart {
                    m,
                    y: y.0,
                    row,
                    y_stride: y.1,
                    run,
                })
                .collect(),
        }
    }

    /// Records the one dispatch of a single token's q|k|v whose runs have two block formats
    /// with a `k::matvec_norm_two` kernel (norm folded in, integer dot products, the
    /// `two_format_qkv` option) and returns true; false (nothing recorded) where it does
    /// not apply.
    fn two_format_qkv(
        &self,
        enc: &mut Encoder,
        parts: &[(&Matrix, u64)],
        norm: Option<&Buffer>,
        x: BufferSlice<'_>,
        y: &Buffer,
    ) -> sluice::Result<bool> {
        let (&[(a, a_row), (b, b_row)], Some(norm)) = (parts, norm) else {
            return Ok(false);
        };
        let Some(desc) = k::matvec_norm_two(a.dtype, b.dtype) else {
            return Ok(false);
        };
        if !self.options.two_format_qkv || !self.device.info().int_dot || a.cols != b.cols {
            return Ok(false);
        }
        let b_y = b_row.checked_sub(a_row).and_then(|r| u32::try_from(r).ok());
        let Some((push, groups)) = b_y.and_then(|b_y| {
            k::matvec_norm_two_push(
                a.dtype,
                a.rows,
                b.dtype,
                b.rows,
                b_y,
                a.cols,
                self.config.rms_eps,
                self.options.matvec_threads_per_row,
            )
        }) else {
            return Ok(false);
        };
        let end = (b_row + b.rows as u64) * 4;
        let bindings = [
            a.slice(),
            b.slice(),
            x,
            norm.slice(..),
            y.slice(a_row * 4..end),
        ];
        enc.dispatch(&self.device.pipeline(desc)?, groups, &bindings, &push)?;
        Ok(true)
    }

    /// A linear op: the norm folded in or separate, gated or not, per the fusion switches.
    fn lower_linear(&self, enc: &mut Encoder, l: &Linear, shape: Shape) -> sluice::Result<()> {
        let layer = l.weight.layer();
        self.label(enc, shape, l.label, layer);
        let (mut xb, mut xs) = self.act(l.input, shape);
        let (yb, ys) = self.act(l.output, shape);
        let parts = self.matrices(l.weight);
        let cols = parts[0].0.cols;
        // The logits are the last token's only: the op runs once, on that token's input.
        let last_only = l.output == Act::Logits && !matches!(shape, Shape::Batch(_));
        let t = if last_only { 1 } else { shape.tokens() };
        let first = if last_only { shape.tokens() - 1 } else { 0 };
        let mut norm = l.norm.map(|n| self.norm_weight(n));
        if let (Some(w), false) = (norm, self.options.fuse_norm) {
            self.rmsnorm(enc, (xb, xs), w, cols, t, first)?;
            (xb, xs) = (&self.scratch.xn, xs);
            norm = None;
        }
        let xn_src = std::ptr::eq(xb, &self.scratch.xn);
        let x_at = if xn_src {
            0
        } else {
            first as u64 * xs as u64 * 4
        };
        let tokens = (shape.batched() && (!last_only || shape.paged())).then_some(Tokens {
            n: t,
            x_stride4: xs / 4,
            y_stride: ys,
            matmul: shape.paged(),
            batch_rows: matches!(shape, Shape::Batch(_)),
            prefill: matches!(shape, Shape::Prefill(_)),
        });
        let x_slice = |m: &Matrix| match tokens {
            Some(_) => xb.slice(x_at..),
            None => xb.slice(x_at..x_at + m.x_bytes()),
        };
        fn y_slice<'b>(buf: &'b Buffer, m: &Matrix, row: u64, batched: bool) -> BufferSlice<'b> {
            if batched {
                buf.slice(row * 4..)
            } else {
                buf.slice(row * 4..(row + m.rows as u64) * 4)
            }
        }
        let batched = tokens.is_some();
        let up = l.up.map(|u| self.matrices(u)[0].0);
        match (tokens, self.batch_path(l, shape)) {
            (Some(t), BatchPath::IntDot) => {
                // The attention wrote o's input quantized already (into `dp`), or the
                // gate/up down's (into its own scratch: the gate/up still reads `dp`).
                let mlp = layer.and_then(|i| self.mlp_q8_output(i, shape));
                let dp = self.batch_dp_scratch().expect("checked by batch_path");
                let made = match l.input {
                    Act::Attn => layer.and_then(|i| self.attn_q8_output(i, shape)),
                    Act::H => mlp,
                    _ => None,
                };
                let x = made.is_none().then(|| (xb.slice(x_at..), xs));
                let dp = made.unwrap_or(dp);
                let q8_out = mlp.filter(|_| l.output == Act::H);
                let parts = self.batch_parts(l, &parts, (yb, ys), shape);
                return self.batch_dp(enc, t, x, norm, dp, &parts, up, l.accumulate, q8_out);
            }
            (Some(t), BatchPath::MatrixUnits) => {
                // f16 activations: made here from x, or written by the producer.
                let made = self.f16_input(l, shape);
                let xh = made.or(self.batch_xh()).expect("checked by batch_path");
                let x = made.is_none().then(|| (xb.slice(x_at..), xs));
                let (y, y_mode) = match self.f16_output(l, shape) {
                    Some(h) => (h, k::Y_F16_PAIRS),
                    None if l.accumulate => ((yb, ys), k::Y_ADD),
                    None => ((yb, ys), k::Y_STORE),
                };
                let parts = self.batch_parts(l, &parts, y, shape);
                return self.batch_cm(enc, t, x, norm, xh, &parts, up, y_mode);
            }
            _ => {}
        }
        // The LM head of a greedy step: the pick and the step's end in the same dispatch.
        if let (Act::Logits, false, Some(norm), Some(plan)) =
            (l.output, batched, norm, self.head_pick(shape))
        {
            let (m, row) = parts[0];
            return self.head_with_pick(
                enc,
                &plan,
                m,
                x_slice(m),
                norm,
                y_slice(yb, m, row, false),
                shape,
            );
        }
        let Some(up) = up else {
            let family = if norm.is_some() {
                Family::Norm
            } else {
                Family::Plain
            };
            // down reading the gate/up's q8 records, o the attention's.
            let handoff = layer
                .filter(|_| norm.is_none())
                .and_then(|i| match l.input {
                    Act::H => self
                        .q8_handoff(i, shape)
                        .map(|(off, end, _)| self.scratch.h.slice(off..end)),
                    Act::Attn => self
                        .attn_q8_handoff(i, shape)
                        .map(|(off, end)| self.scratch.attn.slice(off..end)),
                    _ => None,
                });
            // A K_M mixture's q|k and v of two formats: one dispatch for both.
            let qkv = matches!(l.weight, Weight::Qkv(_));
            if let (Family::Norm, None, false, true) = (family, handoff, batched, qkv) {
                if self.two_format_qkv(enc, &parts, norm, x_slice(parts[0].0), yb)? {
                    return Ok(());
                }
            }
            // Batched: each part where `batch_parts` puts it.
            let dests = batched.then(|| self.batch_parts(l, &parts, (yb, ys), shape));
            for (j, &(m, row)) in parts.iter().enumerate() {
                let (y, tokens) = match (&dests, tokens) {
                    (Some(d), Some(t)) => (
                        d[j].y.slice(d[j].row * 4..),
                        Some(Tokens {
                            y_stride: d[j].y_stride,
                            ..t
                        }),
                    ),
                    _ => (y_slice(yb, m, row, batched), tokens),
                };
                let (x, q8) = match handoff {
                    Some(records) => (records, Q8Io::Consume),
                    None => (x_slice(m), Q8Io::Off),
                };
                self.matvec(enc, family, m, None, x, norm, y, l.accumulate, tokens, q8)?;
            }
            return Ok(());
        };
        let gate = parts[0].0;
        if self.options.fuse_gate_up && gate.dtype == up.dtype {
            let family = if norm.is_some() {
                Family::SiluNorm
            } else {
                Family::Silu
            };
            let (x, mut y) = (x_slice(gate), y_slice(yb, gate, 0, batched));
            let mut q8 = Q8Io::Off;
            if let Some((off, end, tpr)) = layer.and_then(|i| self.q8_handoff(i, shape)) {
                // The floats, then the records (q8_at counts floats of this binding).
                y = yb.slice(0..end);
                q8 = Q8Io::Produce((off / 4) as u32, tpr);
            }
            return self.matvec(enc, family, gate, Some(up), x, norm, y, false, tokens, q8);
        }
        // Unfused: gate and up into g and u (same per-token stride as the output), then
        // silu(g) * u over every token's row.
        let family = if norm.is_some() {
            Family::Norm
        } else {
            Family::Plain
        };
        let s = &self.scratch;
        for (m, out) in [(gate, &s.g), (up, &s.u)] {
            let (x, y) = (x_slice(m), y_slice(out, m, 0, batched));
            self.matvec(enc, family, m, None, x, norm, y, false, tokens, Q8Io::Off)?;
        }
        let n = (t - 1) * ys + gate.rows;
        enc.dispatch(
            &self.kernels.silu_mul,
            [k::groups_for(n, 256), 1, 1],
            &[
                s.g.slice(0..n as u64 * 4),
                s.u.slice(0..n as u64 * 4),
                yb.slice(0..n as u64 * 4),
            ],
            &k::CountPush { n },
        )
    }

    /// The rope kernels' flags for this model ([`rope_flags`]).
    pub(super) fn rope_flags(&self) -> u32 {
        rope_flags(&self.config)
    }

    /// [`rope_ext`] of this model.
    pub(super) fn rope_ext(&self) -> bool {
        rope_ext(&self.config)
    }

    /// The rope kernels' last two bindings for layer `i`: its q/k/v biases and the RoPE
    /// multipliers (a stand-in where the model has none: the flags keep it unread).
    pub(super) fn rope_extras(&self, i: usize) -> [BufferSlice<'_>; 2] {
        let ones = &self.scratch.ones;
        [
            self.layers[i].qkv_bias.as_ref().unwrap_or(ones).slice(..),
            self.rope_freq.as_ref().unwrap_or(ones).slice(..),
        ]
    }

    /// Push constants of `qk_norm_rope`; `token_stride` > 0 for prefill chunks.
    fn rope_push(&self, token_stride: u32) -> k::QkRopePush {
        let c = &self.config;
        k::QkRopePush {
            heads: c.heads as u32,
            kv_heads: c.kv_heads as u32,
            head_dim: c.head_dim as u32,
            capacity: self.options.context as u32,
            flags: self.rope_flags(),
            eps: c.rms_eps,
            theta: c.rope_theta,
            token_stride,
        }
    }

    /// Push constants of split attention; `q_stride` > 0 for prefill chunks.
    fn attn_push(&self, q_stride: u32) -> k::AttnPush {
        let c = &self.config;
        k::AttnPush {
            heads: c.heads as u32,
            kv_heads: c.kv_heads as u32,
            head_dim: c.head_dim as u32,
            capacity: self.options.context as u32,
            chunk: self.options.attention_chunk,
            splits: self.sizes.splits,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
            q_stride,
        }
    }

    /// Push constants of the decode attention with q/k norm, RoPE and KV append folded in
    /// (`attention_rope`, and the attention op of the persistent layer kernel).
    pub(super) fn attn_rope_push(&self) -> k::AttnRopePush {
        let c = &self.config;
        let (rope, attn) = (self.rope_push(0), self.attn_push(0));
        let (_, k_at, v_at) = qkv_offsets(c);
        k::AttnRopePush {
            heads: rope.heads,
            kv_heads: rope.kv_heads,
            head_dim: rope.head_dim,
            capacity: rope.capacity,
            chunk: attn.chunk,
            splits: attn.splits,
            scale: attn.scale,
            flags: rope.flags,
            eps: c.rms_eps,
            theta: c.rope_theta,
            k_offset: k_at as u32,
            v_offset: v_at as u32,
            q8_at: 0,
        }
    }

    fn lower_attention(&self, enc: &mut Encoder, i: usize, shape: Shape) -> sluice::Result<()> {
        if shape.paged() {
            return self.lower_paged_attention(enc, i, shape);
        }
        let c = &self.config;
        let l = &self.layers[i];
        let s = &self.scratch;
        let t = shape.tokens();
        let (nh, hd) = (c.heads as u32, c.head_dim as u64);
        let (q_at, k_at, v_at) = qkv_offsets(c);
        let stride = if shape.batched() {
            qkv_rows(c) as u32
        } else {
            0
        };
        let rope = self.rope_push(stride);
        let attn = self.attn_push(stride);
        let qn = l.q_norm.as_ref().unwrap_or(&s.ones);
        let kn = l.k_norm.as_ref().unwrap_or(&s.ones);
        let splits = self.sizes.splits;
        let [bias, freq] = self.rope_extras(i);
        if self.options.fuse_attention && !shape.batched() {
            self.label(enc, shape, "attention", Some(i));
            let mut push = self.attn_rope_push();
            let q8_kernel;
            let mut kernel = &self.kernels.attn_rope;
            if let Some((off, _)) = self.attn_q8_handoff(i, shape) {
                push.q8_at = (off / 4) as u32;
                q8_kernel = self.device.pipeline(&k::ATTENTION_ROPE_Q8)?;
                kernel = &q8_kernel;
            }
            let bindings = [
                self.params.slice(..),
                s.qkv.slice(..),
                qn.slice(..),
                kn.slice(..),
                l.k_cache.slice(..),
                l.v_cache.slice(..),
                s.partial.slice(..),
                s.attn_counters.slice(..),
                s.attn.slice(..),
                bias,
                freq,
            ];
            // The plain kernel has no bindings for biases and RoPE multipliers.
            let n = if self.rope_ext() { 11 } else { 9 };
            enc.dispatch(kernel, [splits, nh, 1], &bindings[..n], &push)
        } else {
            // Views of q, k and v: one token's rows in decode, from there on in prefill.
            let view = |at: u64, heads: u64| match shape {
                Shape::Decode => s.qkv.slice(at * 4..(at + heads * hd) * 4),
                _ => s.qkv.slice(at * 4..),
            };
            let (q, kk, v) = (
                view(q_at, c.heads as u64),
                view(k_at, c.kv_heads as u64),
                view(v_at, c.kv_heads as u64),
            );
            self.label(enc, shape, "qk_norm_rope", Some(i));
            enc.dispatch(
                &self.kernels.qk_rope,
                [rope.heads + rope.kv_heads, t, 1],
                &[
                    self.params.slice(..),
                    q,
                    kk,
                    v,
                    qn.slice(..),
                    kn.slice(..),
                    l.k_cache.slice(..),
                    l.v_cache.slice(..),
                    bias,
                    freq,
                ],
                &rope,
            )?;
            self.label(enc, shape, "attention", Some(i));
            if shape.batched() {
                // Flash attention over the cache (the chunk's keys were just appended).
                let push = k::AttnPrefillPush {
                    heads: nh,
                    kv_heads: rope.kv_heads,
                    head_dim: rope.head_dim,
                    capacity: rope.capacity,
                    tokens: t,
                    q_stride: stride,
                    o_stride: self.sizes.attn_stride as u32,
                    scale: attn.scale,
                };
                return enc.dispatch(
                    &self.kernels.attn_prefill,
                    k::attention_prefill_groups(self.kernels.attn_prefill_queries, t, nh),
                    &[
                        self.params.slice(..),
                        q,
                        l.k_cache.slice(..),
                        l.v_cache.slice(..),
                        s.attn.slice(..),
                    ],
                    &push,
                );
            }
            // Split attention, combined in the same dispatch by the last split of each head.
            enc.dispatch(
                &self.kernels.attn_split,
                [splits, nh, 1],
                &[
                    self.params.slice(..),
                    q,
                    l.k_cache.slice(..),
                    l.v_cache.slice(..),
                    s.partial.slice(..),
                    s.attn_counters.slice(..),
                    s.attn.slice(..),
                ],
                &attn,
            )
        }
    }

    /// The LM head's plan where it also takes the greedy pick and ends the step
    /// (`sluice_kernels::head_pick_plan`, [`GpuOptions::fuse_pick`](super::GpuOptions)):
    /// greedy single-sequence steps (decode, prefill chunks) with the head's norm folded
    /// in, on a grid the pick's scratch holds.
    fn head_pick(&self, shape: Shape) -> Option<k::HeadPlan> {
        let o = &self.options;
        let greedy = o.sampling.is_none_or(|s| s.is_greedy());
        if o.fuse_pick == Some(false) || !(o.fuse_norm && greedy) || shape.paged() {
            return None;
        }
        // One dispatch over the whole head (not a table split over bindings).
        let m = self.head().whole()?;
        let info = self.device.info();
        let tpr = o.matvec_threads_per_row;
        let plan = k::head_pick_plan(
            m.dtype,
            m.cols,
            m.groups(tpr),
            info.int_dot,
            info.compute_units,
            info.subgroup_size,
            o.fuse_pick == Some(true),
        )?;
        let groups = plan.groups[0].checked_mul(plan.groups[1])?;
        let words = self.scratch.argmax_scratch.size() / 4;
        (u64::from(k::pick_scratch_words(groups)) <= words).then_some(plan)
    }

    /// The LM head `m` over `x` (norm folded in) into the logits `y` with the greedy pick
    /// and the step's end ([`Self::head_pick`]'s `plan`): [`Self::lower_next`]'s work too.
    #[allow(clippy::too_many_arguments)]
    fn head_with_pick(
        &self,
        enc: &mut Encoder,
        plan: &k::HeadPlan,
        m: &Matrix,
        x: BufferSlice<'_>,
        norm: &Buffer,
        y: BufferSlice<'_>,
        shape: Shape,
    ) -> sluice::Result<()> {
        let tpr = self.options.matvec_threads_per_row;
        let mut push = m.push(false, self.config.rms_eps, tpr);
        plan.set_threads_per_row(&mut push, tpr);
        push.pick_steps = shape.tokens();
        enc.dispatch(
            &self.device.pipeline(plan.pick)?,
            plan.groups,
            &[
                m.slice(),
                x,
                norm.slice(..),
                y,
                self.result.slice(..),
                self.params.slice(..),
                self.scratch.argmax_scratch.slice(..),
                self.tokens.slice(..),
            ],
            &push,
        )
    }

    /// The argmax (or the sampling kernel when sampling is on) into the result buffer and
    /// `params.token`, then the position advanced by the step's tokens (greedy: by the
    /// argmax's last workgroup, one dispatch fewer; nothing where the LM head took the
    /// pick, [`Self::head_pick`]).
    fn lower_next(&self, enc: &mut Encoder, shape: Shape) -> sluice::Result<()> {
        if shape.paged() {
            return self.lower_paged_next(enc, shape);
        }
        if self.head_pick(shape).is_some() {
            return Ok(());
        }
        let n = self.config.vocab as u32;
        let Some(s) = self.options.sampling.filter(|s| !s.is_greedy()) else {
            enc.set_label("argmax");
            return enc.dispatch(
                &self.kernels.argmax_advance,
                [k::argmax_groups(n), 1, 1],
                &[
                    self.logits.slice(..),
                    self.result.slice(..),
                    self.params.slice(..),
                    self.scratch.argmax_scratch.slice(..),
                    self.tokens.slice(..),
                ],
                &k::ArgmaxAdvancePush {
                    n,
                    steps: shape.tokens(),
                },
            );
        };
        enc.set_label("sample");
        let push = k::SamplePush {
            n,
            top_k: s.top_k as u32,
            temperature: s.temperature,
            top_p: s.top_p,
            seed_lo: s.seed as u32,
            seed_hi: (s.seed >> 32) as u32,
            _pad: [0; 2],
        };
        enc.dispatch(
            &self.kernels.sample,
            [1, 1, 1],
            &[
                self.logits.slice(..),
                self.result.slice(..),
                self.params.slice(..),
            ],
            &push,
        )?;
        enc.set_label("advance");
        enc.dispatch(
            &self.kernels.advance,
            [1, 1, 1],
            &[self.params.slice(..), self.tokens.slice(..)],
            &k::AdvancePush {
                steps: shape.tokens(),
            },
        )
    }
}

/// The rope kernels' flags for a model: q/k norm, q/k/v biases, scaled RoPE.
pub(super) fn rope_flags(c: &ModelConfig) -> u32 {
    let bit = |on: bool, b: u32| if on { b } else { 0 };
    bit(c.arch.has_qk_norm(), k::ROPE_NORM)
        | bit(c.arch.has_qkv_bias(), k::ROPE_BIAS)
        | bit(c.rope_scaling.is_some(), k::ROPE_FREQ)
}

/// Whether a model has q/k/v biases or RoPE scaling: its fused decode attention is then
/// `attention_rope_ext` (the plain `attention_rope` binds and reads neither).
pub(super) fn rope_ext(c: &ModelConfig) -> bool {
    rope_flags(c) & (k::ROPE_BIAS | k::ROPE_FREQ) != 0
}

/// The linear op of decoder layer `layer` that `f` picks.
pub(super) fn layer_linear(layer: usize, f: impl Fn(&Linear) -> bool) -> Option<Linear> {
    layer::layer_ops(layer).into_iter().find_map(|op| match op {
        Op::Linear(l) if f(&l) => Some(l),
        _ => None,
    })
}
