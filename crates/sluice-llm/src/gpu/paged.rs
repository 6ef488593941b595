//! The batched decode step over a paged KV cache: the model's KV buffers become a pool of
//! fixed-size blocks that sequence slots own through a block table, and one step
//! ([`super::Shape::Batch`]) advances rows of many sequences with one dispatch per op.
//! Block 0 is never handed out: the padding rows of a step (slot `sequences`, whose table
//! row is all zeros) write their keys there.
//!
//! The host side (which blocks a sequence owns, which rows a step runs) lives in
//! [`crate::batch`]; here are the buffers, their checked sizes and the lowering.

use std::sync::Arc;

use sluice::{Buffer, Device, Encoder, Pipeline, ResourceClass};
use sluice_kernels as k;

use super::layout::{qkv_offsets, qkv_rows, Sizes};
use super::{GpuModel, Shape};
use crate::config::ModelConfig;
use crate::error::LlmError;
use crate::layer::Act;

/// Shape of the paged KV cache and the batched step. With it, [`super::GpuOptions::context`]
/// is the pool: positions of all sequences together (a multiple of `block`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PagedOptions {
    /// Rows (tokens) one batched step takes at most. Default 64.
    pub max_rows: usize,
    /// Sequence slots. Default 64.
    pub sequences: usize,
    /// Positions one sequence may hold (prompt + generated). Default 4096.
    pub seq_context: usize,
    /// Positions per KV block. Default 16.
    pub block: usize,
}

/// Positions per KV block unless [`PagedOptions::block`] says otherwise.
pub const DEFAULT_KV_BLOCK: usize = 16;

impl Default for PagedOptions {
    fn default() -> Self {
        PagedOptions {
            max_rows: 64,
            sequences: 64,
            seq_context: 4096,
            block: DEFAULT_KV_BLOCK,
        }
    }
}

/// The largest row group a batched step's projections can have
/// ([`GpuModel::batch_row_group`]): the matrix-unit kernels' tokens per workgroup.
pub const BATCH_ROW_GROUP_MAX: usize = k::MATVEC_BATCH_CMT_TOKENS as usize;

/// Sequence slots from which a paged engine runs the decode rows of block-format weights
/// (every projection and the LM head) on the matrix units; smaller engines run them on
/// integer dot products (`sluice_kernels::matvec_batch_dp`, where the device has them),
/// except engines of [`BLOCK_ROWS_MATRIX_UNITS_MIN_SEQUENCES_LARGE`] slots or more of
/// models with large layers ([`BLOCK_ROWS_LARGE_LAYER_WEIGHTS`]). Prompt chunks run on the
/// matrix units in every engine (where the device has them).
///
/// Fixed per engine, never per step, so a sequence's tokens do not depend on how many
/// others run with it (batch invariance). The matrix-unit kernels cost about as much for
/// one row as for 32 (each workgroup decodes its weights once for 32 tokens), the
/// integer-dot ones grow row by row. Measured on an H200 (BENCHMARKS.md, fortieth
/// session), qwen3-0.6b Q4_K_M, tok/s at 1 / 8 / 16 / 32 rows, integer dots (32-slot
/// engine) vs matrix units (64-slot engine): 569 / 3786 / 6662 / 9504 vs 485 / 3759 / 7069
/// / 11658 (+23% with every slot busy, level at a quarter, -15% alone).
pub const BLOCK_ROWS_MATRIX_UNITS_MIN_SEQUENCES: usize = 32;

/// Sequence slots from which a paged engine of a model with large layers runs its decode
/// rows of block-format weights on the matrix units ([`PagedOptions::block_rows_on_matrix_units`]).
/// Measured on an H200 (BENCHMARKS.md, fortieth session), qwen3-4b Q4_K_M, tok/s at 1 / 8
/// / 16 rows, integer dots (16-slot engine) vs matrix units (32-slot engine): 277 / 1358 /
/// 1877 vs 203 / 1698 / 3194: the step on the matrix units is nearly flat (4.7-5.0 ms),
/// the integer-dot one grows by ~0.33 ms a row from 3.6 ms, so the matrix units win from
/// about 5 busy slots (+25% at 8, +70% at 16, -27% alone).
pub const BLOCK_ROWS_MATRIX_UNITS_MIN_SEQUENCES_LARGE: usize = 8;

/// Projection weights per decoder layer ([`ModelConfig::layer_projection_weights`]) from
/// which a model counts as large for [`BLOCK_ROWS_MATRIX_UNITS_MIN_SEQUENCES_LARGE`]:
/// qwen3-4b has 101 M, qwen3-0.6b 16 M.
pub const BLOCK_ROWS_LARGE_LAYER_WEIGHTS: u64 = 1 << 25;

impl PagedOptions {
    /// Whether decode rows of a model with `layer_weights` projection weights per layer
    /// run block-format weights on the matrix units (where the device has them) rather
    /// than on integer dot products: [`BLOCK_ROWS_MATRIX_UNITS_MIN_SEQUENCES`] slots or
    /// more, or [`BLOCK_ROWS_MATRIX_UNITS_MIN_SEQUENCES_LARGE`] for layers of
    /// [`BLOCK_ROWS_LARGE_LAYER_WEIGHTS`] or more. Fixed per engine and model (batch
    /// invariance).
    pub fn block_rows_on_matrix_units(&self, layer_weights: u64) -> bool {
        self.sequences >= BLOCK_ROWS_MATRIX_UNITS_MIN_SEQUENCES
            || (self.sequences >= BLOCK_ROWS_MATRIX_UNITS_MIN_SEQUENCES_LARGE
                && layer_weights >= BLOCK_ROWS_LARGE_LAYER_WEIGHTS)
    }

    /// Positions per attention split at least in this engine
    /// ([`super::GpuOptions::batch_attention_split`], `asked`): `None` for one split per row.
    pub fn attention_split(&self, asked: Option<u32>) -> Option<u32> {
        match asked {
            Some(0) => None,
            // Past any context: one split (and no overflow in the kernel's arithmetic).
            Some(n) => Some(n.min(1 << 24)),
            None => (self.sequences <= k::BATCH_ATTENTION_SPLIT_MAX_SEQUENCES as usize)
                .then_some(k::BATCH_ATTENTION_SPLIT),
        }
    }

    /// Table entries per sequence slot.
    pub fn max_blocks(&self) -> usize {
        self.seq_context.div_ceil(self.block.max(1))
    }

    /// Checks the options against the pool of `context` positions.
    pub fn check(&self, c: &ModelConfig, context: usize) -> Result<(), LlmError> {
        let bad = |m: String| Err(LlmError::InvalidArgument(m));
        if self.block == 0 || self.block > 1024 {
            return bad(format!(
                "KV block of {} positions: use 1..=1024",
                self.block
            ));
        }
        if self.max_rows == 0 || self.max_rows > super::layout::MAX_CHUNK {
            return bad(format!(
                "batch of {} rows: use 1..={}",
                self.max_rows,
                super::layout::MAX_CHUNK
            ));
        }
        if self.sequences == 0 || self.sequences > 65536 {
            return bad(format!("{} sequences: use 1..=65536", self.sequences));
        }
        if self.seq_context == 0 || self.seq_context > context {
            return bad(format!(
                "sequence context {} must be in 1..={context} (the pool)",
                self.seq_context
            ));
        }
        if !context.is_multiple_of(self.block) || context / self.block < 2 {
            return bad(format!(
                "KV pool of {context} positions must be at least 2 blocks of {} and a multiple of it",
                self.block
            ));
        }
        if !(c.heads * c.head_dim).is_multiple_of(8) {
            return bad(format!(
                "batched decode needs heads x head_dim a multiple of 8 (is {})",
                c.heads * c.head_dim
            ));
        }
        Ok(())
    }
}

/// Which optional buffers a paged engine holds: those of the integer-dot matvec
/// (`int_dot`), and one qkv side region for a split qkv (`qkv_runs`, 1 to 3; the
/// matrix-unit matvecs' scratch, one region per run, is `super::mu`'s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PagedFeatures {
    pub int_dot: bool,
    pub qkv_runs: usize,
}

impl PagedFeatures {
    /// The most any device and any weight formats ask for: what memory checks count before
    /// the device's features and the layers' formats are known.
    pub const MOST: PagedFeatures = PagedFeatures {
        int_dot: true,
        qkv_runs: 3,
    };
}

/// The paged engine's buffers: each one's bytes (0: not made) and the split attention's
/// geometry. [`Paged::new`] allocates exactly these, and [`Sizes::for_options`] counts them
/// (with [`PagedFeatures::MOST`]) before anything is allocated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PagedLayout {
    pub tokens: u64,
    pub rows: u64,
    pub table: u64,
    pub logits: u64,
    pub results: u64,
    pub argmax_scratch: u64,
    pub qkv_side: u64,
    /// Bytes of the int8 words of x's rows (their scales take half as many).
    pub dp: u64,
    pub dp_h: u64,
    /// Workgroups of the batched attention per row.
    pub attention_groups: u32,
    /// Positions per attention split at least (1 when unused).
    pub attn_chunk: u32,
    /// Splits the longest sequence asks for.
    pub attn_splits: u32,
    pub attn_part: u64,
    pub attn_tick: u64,
}

impl PagedLayout {
    /// The buffers of an engine of `opts` whose steps take up to `rows_cap` rows, with the
    /// optional buffers `f` names; `attention_split` as [`PagedOptions::attention_split`].
    /// Errors name the sizes that overflow.
    pub fn new(
        c: &ModelConfig,
        opts: &PagedOptions,
        rows_cap: usize,
        f: PagedFeatures,
        attention_split: Option<u32>,
    ) -> Result<PagedLayout, LlmError> {
        let too_big = |what: &str| {
            LlmError::InvalidArgument(format!(
                "paged buffers too large: {what} ({} sequences x {} blocks, {} rows, {rows_cap} rows of scratch, vocab {})",
                opts.sequences,
                opts.max_blocks(),
                opts.max_rows,
                c.vocab
            ))
        };
        let mul = |what: &str, factors: &[u64]| -> Result<u64, LlmError> {
            factors
                .iter()
                .try_fold(1u64, |a, &b| a.checked_mul(b))
                .ok_or_else(|| too_big(what))
        };
        let (rows, max_rows) = (rows_cap as u64, opts.max_rows as u64);
        let widest = c.hidden.max(c.intermediate).max(c.heads * c.head_dim) as u64;
        let int8_rows = |what: &str, cols: u64| -> Result<u64, LlmError> {
            if !f.int_dot {
                return Ok(0);
            }
            mul(what, &[max_rows, cols.next_multiple_of(32)])
        };
        let runs = f.qkv_runs.max(1) as u64;
        let qkv_side = if runs > 1 {
            mul("qkv side rows", &[rows, qkv_side_stride(c) as u64, 4])?
        } else {
            0
        };
        let attention_groups =
            k::batch_attention_kernel(c.heads as u32, c.kv_heads as u32, c.head_dim as u32).1;
        let split = opts.attention_split(attention_split);
        let attn_splits = split.map_or(1, |chunk| {
            k::batch_attention_splits(
                opts.seq_context as u32,
                chunk,
                k::BATCH_ATTENTION_MAX_SPLITS,
            )
        });
        let (attn_part, attn_tick) =
            match attention_scratch(c, rows_cap, attention_groups, attn_splits)? {
                Some((floats, tickets)) => (
                    mul("attention partials", &[floats, 4])?,
                    mul("attention tickets", &[tickets, 4])?,
                ),
                None => (0, 0),
            };
        let argmax_words = k::argmax_rows_scratch_words(max_rows.max(1) as u32, argmax_groups(c));
        Ok(PagedLayout {
            tokens: mul("tokens", &[rows.saturating_add(4), 4])?,
            rows: mul("rows", &[rows, 8])?,
            table: mul(
                "block table",
                &[opts.sequences as u64 + 1, opts.max_blocks() as u64, 4],
            )?,
            logits: mul("logits", &[max_rows, c.vocab as u64, 4])?,
            results: mul("results", &[max_rows, k::TOKEN_RESULT_BYTES])?,
            argmax_scratch: mul("argmax scratch", &[argmax_words, 4])?,
            qkv_side,
            dp: int8_rows("int8 activations", widest)?,
            dp_h: int8_rows("int8 MLP activations", c.intermediate as u64)?,
            attention_groups,
            attn_chunk: split.unwrap_or(1),
            attn_splits,
            attn_part,
            attn_tick,
        })
    }

    /// Bytes of all the buffers.
    pub fn total(&self) -> Result<u64, LlmError> {
        let int8 = |q: u64| q.checked_add(q / 2);
        [
            Some(self.tokens),
            Some(self.rows),
            Some(self.table),
            Some(self.logits),
            Some(self.results),
            Some(self.argmax_scratch),
            Some(self.qkv_side),
            int8(self.dp),
            int8(self.dp_h),
            Some(self.attn_part),
            Some(self.attn_tick),
        ]
        .into_iter()
        .try_fold(0u64, |a, b| b.and_then(|b| a.checked_add(b)))
        .ok_or_else(|| LlmError::InvalidArgument("paged buffers overflow 64 bits".into()))
    }
}

impl Sizes {
    /// The checked sizes of everything `o` asks the model to allocate besides weights:
    /// [`Sizes::new`], with scratch for a batched step's rows and the paged buffers when
    /// `o.paged` is set (all of them, as on a device with integer dot products and a model
    /// whose q, k and v have three formats: [`PagedFeatures::MOST`]), and the matrix-unit
    /// matvecs' scratch where a model may use it (`super::mu`: paged engines, and prefill
    /// chunks with [`super::GpuOptions::prefill_matrix_units`]; counted as on a device
    /// with matrix units).
    pub fn for_options(c: &ModelConfig, o: &super::GpuOptions) -> Result<Sizes, LlmError> {
        let (mut s, extra) = match &o.paged {
            None => (
                Sizes::new(c, o.context, o.prefill_chunk, o.attention_chunk)?,
                0,
            ),
            Some(p) => {
                p.check(c, o.context)?;
                let chunk = o.prefill_chunk.max(p.max_rows);
                let lay =
                    PagedLayout::new(c, p, chunk, PagedFeatures::MOST, o.batch_attention_split)?;
                (
                    Sizes::new(c, o.context, chunk, o.attention_chunk)?,
                    lay.total()?,
                )
            }
        };
        let mu = if o.paged.is_some() || o.prefill_matrix_units {
            super::mu::MuLayout::new(c, s.chunk, PagedFeatures::MOST.qkv_runs)?.total()?
        } else {
            0
        };
        s.total = s
            .total
            .checked_add(extra)
            .and_then(|t| t.checked_add(mu))
            .ok_or_else(|| LlmError::InvalidArgument("paged buffers overflow".into()))?;
        Ok(s)
    }
}

/// One row of a batched step: `token` at position `pos` of sequence slot `slot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchRow {
    /// Input token.
    pub token: u32,
    /// Its position in its sequence.
    pub pos: u32,
    /// The sequence slot (`0..sequences`; `sequences` = padding).
    pub slot: u32,
}

/// Buffers and pipelines of the paged step.
pub(crate) struct Paged {
    pub opts: PagedOptions,
    /// `{token, pos, seq_len, pad}` header (unused) then the rows' tokens: the embed
    /// kernel's params layout.
    pub tokens: Buffer,
    /// `(pos, slot)` per row.
    pub rows: Buffer,
    /// `(sequences + 1) x max_blocks` block ids.
    pub table: Buffer,
    /// Logits of every row of a [`Shape::Batch`] step, `[max_rows, vocab]`.
    pub logits: Buffer,
    /// Four u32 per row (see `sluice_kernels::TokenResult`).
    pub results: Buffer,
    /// The qkv rows from `qkv_side_from` on of layers whose q, k and v are split by format
    /// (`Qkv::side_first`), `[rows_cap, qkv_side_stride]`: the runs after the first write
    /// here, so that they share no bytes with the first and run beside it; `None` when no
    /// layer is split.
    pub qkv_side: Option<Buffer>,
    /// The rows' activations quantized to int8 (words, then block scales) for the
    /// integer-dot batched matvec (`sluice_kernels::matvec_batch_dp`), `[max_rows, widest
    /// projection input]`; `None` without integer dot products.
    pub dp: Option<(Buffer, Buffer)>,
    /// The same for the MLP hidden state, written by the gate/up for down
    /// (`GpuModel::mlp_q8_output`), `[max_rows, intermediate]`.
    pub dp_h: Option<(Buffer, Buffer)>,
    pub rope: Arc<Pipeline>,
    pub attention: Arc<Pipeline>,
    /// Workgroups of `attention` per row (`sluice_kernels::batch_attention_kernel`).
    pub attention_groups: u32,
    /// Positions per split of a row's attention at least (`PagedOptions::attention_split`
    /// of `GpuOptions::batch_attention_split`; 1 when unused).
    pub attn_chunk: u32,
    /// Splits the longest sequence asks for (`sluice_kernels::batch_attention_splits`): the
    /// partials' room per (row, workgroup column); 1: no splitting.
    pub attn_splits: u32,
    /// The split attention's partials and tickets (zero between steps); `None` when no
    /// sequence needs more than one split.
    pub attn_scratch: Option<(Buffer, Buffer)>,
    /// Dispatch depth of the attention for the rows last set
    /// (`sluice_kernels::batch_attention_z` of their longest context).
    pub attn_z: std::cell::Cell<u32>,
    /// Whether the rows last set are one per sequence (the padding rows aside): a step of
    /// such rows may fold batch_rope into its attention ([`GpuModel::batch_rope_folded`]).
    pub decode_only: std::cell::Cell<bool>,
    pub argmax: Arc<Pipeline>,
    /// Per-row tickets and workgroup entries of `argmax` (zero between steps).
    pub argmax_scratch: Buffer,
}

impl Paged {
    /// Buffers for steps of up to `rows_cap` rows (the scratch's rows; at least
    /// `opts.max_rows`).
    pub fn new(
        device: &Device,
        c: &ModelConfig,
        opts: PagedOptions,
        rows_cap: usize,
        qkv_runs: usize,
        attention_split: Option<u32>,
    ) -> Result<Paged, LlmError> {
        let features = PagedFeatures {
            int_dot: device.info().int_dot,
            qkv_runs,
        };
        let lay = PagedLayout::new(c, &opts, rows_cap, features, attention_split)?;
        let (g, t) = (ResourceClass::Generic, ResourceClass::TokenScratch);
        // Buffers of 0 bytes in the layout are not made.
        let make = |name: &str, bytes: u64, class| -> Result<Option<Buffer>, LlmError> {
            Ok(match bytes {
                0 => None,
                _ => Some(device.create_buffer(name, bytes, class)?),
            })
        };
        // Tickets and tables: zero between steps.
        let zeroed = |name: &str, bytes: u64| -> Result<Buffer, LlmError> {
            let b = device.create_buffer(name, bytes, g)?;
            b.write(0, &vec![0u32; (bytes / 4) as usize])?;
            Ok(b)
        };
        let pair = |part: Option<Buffer>, tick: u64, name: &str| -> Result<_, LlmError> {
            part.map(|part| Ok((part, zeroed(name, tick)?))).transpose()
        };
        // Int8 words, then half as many bytes of block scales.
        let int8 = |name: &str, q: u64| -> Result<Option<(Buffer, Buffer)>, LlmError> {
            Ok(make(&format!("{name}q"), q, t)?.zip(make(&format!("{name}d"), q / 2, t)?))
        };
        let attention =
            k::batch_attention_kernel(c.heads as u32, c.kv_heads as u32, c.head_dim as u32).0;
        Ok(Paged {
            tokens: device.create_buffer("batch.tokens", lay.tokens, g)?,
            rows: device.create_buffer("batch.rows", lay.rows, g)?,
            table: zeroed("kv.table", lay.table)?,
            logits: device.create_buffer("batch.logits", lay.logits, t)?,
            results: device.create_buffer(
                "batch.results",
                lay.results,
                ResourceClass::PersistentOutput,
            )?,
            rope: device.pipeline(&k::BATCH_ROPE)?,
            attention: device.pipeline(attention)?,
            attention_groups: lay.attention_groups,
            attn_chunk: lay.attn_chunk,
            attn_splits: lay.attn_splits,
            attn_scratch: pair(
                make("batch.attn_partial", lay.attn_part, t)?,
                lay.attn_tick,
                "batch.attn_tick",
            )?,
            attn_z: std::cell::Cell::new(1),
            decode_only: std::cell::Cell::new(false),
            argmax: device.pipeline(&k::ARGMAX_ROWS)?,
            argmax_scratch: zeroed("batch.argmax_scratch", lay.argmax_scratch)?,
            qkv_side: make("batch.qkv_side", lay.qkv_side, t)?,
            dp: int8("batch.x", lay.dp)?,
            dp_h: int8("batch.h", lay.dp_h)?,
            opts,
        })
    }
}

/// Powers of two below `max`, then `max` (empty for 0): the values `n.next_power_of_two()
/// .min(max)` takes for n in 1..=max, i.e. the row buckets and attention depths a batched
/// step is recorded for.
pub(crate) fn power_buckets(max: usize) -> Vec<usize> {
    let mut b: Vec<usize> = std::iter::successors(Some(1usize), |n| n.checked_mul(2))
        .take_while(|&n| n < max)
        .collect();
    if max > 0 {
        b.push(max);
    }
    b
}

/// Floats of partials and u32 tickets of the split batched attention for steps of up to
/// `rows_cap` rows, `groups` workgroup columns per row and `splits` splits per row (the
/// kernel's lanes per value included); `None` for one split.
fn attention_scratch(
    c: &ModelConfig,
    rows_cap: usize,
    groups: u32,
    splits: u32,
) -> Result<Option<(u64, u64)>, LlmError> {
    if splits <= 1 {
        return Ok(None);
    }
    let rows = u32::try_from(rows_cap)
        .map_err(|_| LlmError::InvalidArgument(format!("batch of {rows_cap} rows")))?;
    let lanes = k::batch_attention_lanes(c.heads as u32, c.kv_heads as u32);
    Ok(Some(k::batch_attention_scratch(
        rows,
        groups,
        splits,
        c.head_dim as u32,
        lanes,
    )))
}

/// Workgroups the batched argmax aims at over all its rows (two 1024-invocation
/// workgroups per multiprocessor of the H100).
const ARGMAX_ROWS_WORKGROUPS: u32 = 264;

/// Most workgroups per row of the batched argmax for `c`'s vocabulary (its scratch is
/// sized for these).
fn argmax_groups(c: &ModelConfig) -> u32 {
    k::argmax_groups(c.vocab as u32)
}

/// The first qkv row `Paged::qkv_side` holds (k's: a split qkv's second run starts at k
/// or later).
pub(super) fn qkv_side_from(c: &ModelConfig) -> u64 {
    qkv_offsets(c).1
}

/// Floats per row of `Paged::qkv_side`.
pub(super) fn qkv_side_stride(c: &ModelConfig) -> u32 {
    (qkv_rows(c) as u64 - qkv_side_from(c)) as u32
}

impl GpuModel {
    fn paged_state(&self) -> Result<&Paged, LlmError> {
        self.paged.as_ref().ok_or_else(|| {
            LlmError::InvalidArgument("the model was loaded without a paged KV cache".into())
        })
    }

    /// The paged-cache options, when the model was loaded with them.
    pub fn paged_options(&self) -> Option<&PagedOptions> {
        self.paged.as_ref().map(|p| &p.opts)
    }

    /// Whether the batched step runs decode rows of block-format weights on the matrix
    /// units (where the device has them): [`PagedOptions::block_rows_on_matrix_units`] for
    /// this model's layers; false without a paged cache.
    pub fn block_rows_on_matrix_units(&self) -> bool {
        self.paged_options()
            .is_some_and(|o| o.block_rows_on_matrix_units(self.config.layer_projection_weights()))
    }

    /// Layers whose q, k and v projections are split by weight format (several
    /// dispatches); in a batched step those dispatches share no bytes and run side by
    /// side (one barrier for all of them).
    pub fn split_qkv_layers(&self) -> usize {
        self.layers.iter().filter(|l| l.qkv.runs() > 1).count()
    }

    pub(super) fn paged_tokens(&self) -> &Buffer {
        &self.paged.as_ref().expect("checked by encode_batch").tokens
    }

    /// Where a batched step writes layer `i`'s qkv rows from `row` on: the buffer, the
    /// float of a token's row there, and floats per row. A split qkv's runs after the
    /// first go to `Paged::qkv_side` (disjoint bytes: no barrier between the runs).
    pub(super) fn qkv_dest(&self, i: usize, row: u64, shape: Shape) -> (&Buffer, u64, u32) {
        let c = &self.config;
        let side = self.paged.as_ref().and_then(|p| p.qkv_side.as_ref());
        if let (true, Some(first), Some(side)) =
            (shape.paged(), self.layers[i].qkv.side_first(), side)
        {
            if row >= first {
                return (side, row - qkv_side_from(c), qkv_side_stride(c));
            }
        }
        (&self.scratch.qkv, row, qkv_rows(c) as u32)
    }

    /// The int8 activation buffers of the integer-dot batched matvec, if any.
    pub(super) fn batch_dp_scratch(&self) -> Option<&(Buffer, Buffer)> {
        self.paged.as_ref().and_then(|p| p.dp.as_ref())
    }

    pub(super) fn batch_dp_h_scratch(&self) -> Option<&(Buffer, Buffer)> {
        self.paged.as_ref().and_then(|p| p.dp_h.as_ref())
    }

    pub(super) fn paged_logits(&self) -> &Buffer {
        &self.paged.as_ref().expect("checked by encode_batch").logits
    }

    /// Writes the block table row of sequence `slot`: its blocks in position order (the
    /// rest of the row points at block 0).
    pub fn set_block_table(&self, slot: usize, blocks: &[u32]) -> Result<(), LlmError> {
        let p = self.paged_state()?;
        let mb = p.opts.max_blocks();
        let pool = (self.options.context / p.opts.block) as u32;
        if slot >= p.opts.sequences || blocks.len() > mb {
            return Err(LlmError::InvalidArgument(format!(
                "block table of slot {slot} with {} blocks (slots {}, blocks per sequence {mb})",
                blocks.len(),
                p.opts.sequences
            )));
        }
        if let Some(b) = blocks.iter().find(|&&b| b == 0 || b >= pool) {
            return Err(LlmError::InvalidArgument(format!(
                "block id {b} outside 1..{pool}"
            )));
        }
        let mut row = blocks.to_vec();
        row.resize(mb, 0);
        p.table.write((slot * mb * 4) as u64, &row)?;
        Ok(())
    }

    /// Writes the rows of the next batched step.
    pub fn set_batch_rows(&self, rows: &[BatchRow]) -> Result<(), LlmError> {
        let p = self.paged_state()?;
        if rows.is_empty() || rows.len() > self.sizes.chunk {
            return Err(LlmError::InvalidArgument(format!(
                "batch of {} rows (1..={})",
                rows.len(),
                self.sizes.chunk
            )));
        }
        let mut tokens = vec![0u32; 4];
        let mut words = Vec::with_capacity(rows.len() * 2);
        for r in rows {
            if r.token as usize >= self.config.vocab
                || r.slot as usize > p.opts.sequences
                || r.pos as usize >= p.opts.seq_context
            {
                return Err(LlmError::InvalidArgument(format!(
                    "batch row {r:?}: token < {}, slot <= {}, position < {}",
                    self.config.vocab, p.opts.sequences, p.opts.seq_context
                )));
            }
            tokens.push(r.token);
            words.extend([r.pos, r.slot]);
        }
        p.tokens.write(0, &tokens)?;
        p.rows.write(0, &words)?;
        let mut slots: Vec<u32> = rows
            .iter()
            .map(|r| r.slot)
            .filter(|&s| s as usize != p.opts.sequences)
            .collect();
        let real = slots.len();
        slots.sort_unstable();
        slots.dedup();
        p.decode_only.set(slots.len() == real);
        let longest = rows.iter().map(|r| r.pos + 1).max().unwrap_or(1);
        p.attn_z.set(k::batch_attention_z(
            longest.min(p.opts.seq_context as u32),
            p.attn_chunk,
            p.attn_splits,
        ));
        Ok(())
    }

    /// Splits of the longest context among the rows last set: the attention's dispatch
    /// depth in the step [`GpuModel::encode_batch`] records next (a recording replays
    /// only for rows of the same depth).
    pub fn batch_attention_depth(&self) -> usize {
        self.paged.as_ref().map_or(1, |p| p.attn_z.get() as usize)
    }

    /// Every attention depth a batched step of this engine can take (its rows' contexts
    /// from 1 position to a sequence's whole context), ascending: a step is recorded once
    /// per depth and row bucket.
    pub fn batch_attention_depths(&self) -> Vec<usize> {
        let Some(p) = &self.paged else { return vec![1] };
        // A row's splits grow one by one with its context, so the depths are the powers
        // of two below the whole context's depth, and that depth.
        let top = k::batch_attention_z(p.opts.seq_context as u32, p.attn_chunk, p.attn_splits);
        power_buckets(top as usize)
    }

    /// Whether the step [`GpuModel::encode_batch`] records next for the rows last set (a
    /// step with logits for every row) folds batch_rope into its attention: the rows are
    /// one per sequence (no prompt rows: a prompt row attends to keys other rows of its
    /// step append), `GpuOptions::fuse_attention` holds and the attention kernel has such a
    /// form (`sluice_kernels::batch_attention_rope_kernel`). A recording replays only for
    /// rows of the same answer.
    pub fn batch_rope_folded(&self) -> bool {
        self.paged.as_ref().is_some_and(|p| p.decode_only.get()) && self.batch_rope_folds()
    }

    /// Whether this engine's decode-only steps fold batch_rope into their attention (see
    /// [`GpuModel::batch_rope_folded`]).
    pub fn batch_rope_folds(&self) -> bool {
        self.batch_rope_kernel().is_some()
    }

    /// The attention kernel of this engine's decode-only steps with batch_rope folded in:
    /// `None` without a paged cache, without `GpuOptions::fuse_attention` or where the
    /// model's batched attention kernel has no such form.
    fn batch_rope_kernel(&self) -> Option<&'static sluice::kernel::KernelDesc> {
        let c = &self.config;
        let plain =
            k::batch_attention_kernel(c.heads as u32, c.kv_heads as u32, c.head_dim as u32).0;
        (self.paged.is_some() && self.options.fuse_attention)
            .then(|| k::batch_attention_rope_kernel(plain))
            .flatten()
    }

    /// Sets whether the next step recorded is decode-only (see
    /// [`GpuModel::batch_rope_folded`]) without rows: for recording steps ahead, the rows'
    /// own answer being set again by [`GpuModel::set_batch_rows`] before any step runs.
    pub(crate) fn set_batch_decode_only(&self, decode_only: bool) {
        if let Some(p) = &self.paged {
            p.decode_only.set(decode_only);
        }
    }

    /// Sets the attention depth of the next step recorded (see
    /// [`GpuModel::batch_attention_depths`]) without rows: for recording steps ahead, the
    /// rows' own depth being set again by [`GpuModel::set_batch_rows`] before any step runs.
    pub(crate) fn set_batch_attention_depth(&self, depth: usize) {
        if let Some(p) = &self.paged {
            p.attn_z
                .set(depth.clamp(1, p.attn_splits.max(1) as usize) as u32);
        }
    }

    /// Rows a [`Shape::Batch`] step's projections take per pass over the weights: the
    /// matrix-unit kernels' token group (`sluice_kernels::MATVEC_BATCH_CMT_TOKENS`) where
    /// they run the rows, 1 where the cost grows row by row (integer dot products, the
    /// matmul family); 0 without a paged cache. A scheduler filling a step up to a whole
    /// group adds rows at a small cost; one row past it starts another pass.
    pub fn batch_row_group(&self) -> usize {
        let Some(p) = &self.paged else { return 0 };
        let dp_rows = p.dp.is_some()
            && !self.block_rows_on_matrix_units()
            && self
                .weight_formats()
                .iter()
                .any(|(d, _)| k::matvec_batch_dp(*d, false).is_some());
        if self.mu.is_some() && !dp_rows {
            k::MATVEC_BATCH_CMT_TOKENS as usize
        } else {
            1
        }
    }

    /// Rows a batched step may take: `max_rows` with logits for every row, the scratch's
    /// chunk with `last_only`.
    pub fn batch_rows_max(&self, last_only: bool) -> usize {
        match (&self.paged, last_only) {
            (None, _) => 0,
            (Some(p), false) => p.opts.max_rows,
            (Some(_), true) => self.sizes.chunk,
        }
    }

    /// Records a batched step over the `n` rows written by [`GpuModel::set_batch_rows`]:
    /// logits and argmax for every row, or (`last_only`) for the last row only.
    pub fn encode_batch(
        &self,
        enc: &mut Encoder,
        n: usize,
        last_only: bool,
    ) -> Result<(), LlmError> {
        self.paged_state()?;
        let max = self.batch_rows_max(last_only);
        let n32 = u32::try_from(n)
            .ok()
            .filter(|&v| v >= 1 && v as usize <= max)
            .ok_or_else(|| {
                LlmError::InvalidArgument(format!("batched step of {n} rows (1..={max})"))
            })?;
        let shape = if last_only {
            Shape::BatchPrefill(n32)
        } else {
            Shape::Batch(n32)
        };
        Ok(self.encode(enc, shape)?)
    }

    /// Results of the last batched step's first `n` rows (waits for it).
    pub fn batch_results(&self, n: usize) -> Result<Vec<k::TokenResult>, LlmError> {
        let p = self.paged_state()?;
        let w = p.results.read::<u32>(0, n.min(p.opts.max_rows) * 4)?;
        Ok(w.chunks_exact(4)
            .map(|c| k::TokenResult::from_words([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Logits of row `row` of the last batched step (of its last row for `last_only`).
    pub fn batch_logits(&self, row: usize, last_only: bool) -> Result<Vec<f32>, LlmError> {
        let p = self.paged_state()?;
        let v = self.config.vocab;
        if last_only {
            return self.logits();
        }
        if row >= p.opts.max_rows {
            return Err(LlmError::InvalidArgument(format!("row {row} of a batch")));
        }
        Ok(p.logits.read::<f32>((row * v * 4) as u64, v)?)
    }

    /// q/k norm + RoPE + paged append, then attention through the block table.
    pub(super) fn lower_paged_attention(
        &self,
        enc: &mut Encoder,
        i: usize,
        shape: Shape,
    ) -> sluice::Result<()> {
        let p = self.paged.as_ref().expect("checked by encode_batch");
        let c = &self.config;
        let l = &self.layers[i];
        let s = &self.scratch;
        let n = shape.tokens();
        let (q_at, k_at, v_at) = qkv_offsets(c);
        let (block, max_blocks) = (p.opts.block as u32, p.opts.max_blocks() as u32);
        let capacity = self.options.context as u32;
        let qn = l.q_norm.as_ref().unwrap_or(&s.ones);
        let kn = l.k_norm.as_ref().unwrap_or(&s.ones);
        let [bias, freq] = self.rope_extras(i);
        let (qd, kd, vd) = (
            self.qkv_dest(i, q_at, shape),
            self.qkv_dest(i, k_at, shape),
            self.qkv_dest(i, v_at, shape),
        );
        // Decode-only steps: batch_rope folded into the attention (its bindings 12-17).
        let fold = if matches!(shape, Shape::Batch(_)) && p.decode_only.get() {
            self.batch_rope_kernel()
        } else {
            None
        };
        if fold.is_none() {
            self.label(enc, shape, "qk_norm_rope", Some(i));
            enc.dispatch(
                &p.rope,
                [(c.heads + c.kv_heads) as u32, n, 1],
                &[
                    p.rows.slice(..),
                    p.table.slice(..),
                    qd.0.slice(qd.1 * 4..),
                    kd.0.slice(kd.1 * 4..),
                    vd.0.slice(vd.1 * 4..),
                    qn.slice(..),
                    kn.slice(..),
                    l.k_cache.slice(..),
                    l.v_cache.slice(..),
                    bias,
                    freq,
                ],
                &k::BatchRopePush {
                    heads: c.heads as u32,
                    kv_heads: c.kv_heads as u32,
                    head_dim: c.head_dim as u32,
                    capacity,
                    flags: self.rope_flags(),
                    eps: c.rms_eps,
                    theta: c.rope_theta,
                    token_stride: qd.2,
                    block,
                    max_blocks,
                    k_stride: kd.2,
                    v_stride: vd.2,
                },
            )?;
        }
        self.label(enc, shape, "attention", Some(i));
        // Into the f16 activations of the projection after it where that one runs on the
        // matrix units (see `f16_input`), else the f32 `attn`.
        let consumer = super::lower::layer_linear(i, |l| l.input == Act::Attn);
        let f16_out = consumer.and_then(|o| self.f16_input(&o, shape));
        let (out, o_stride) = match f16_out {
            Some(xh) => (xh, (c.heads * c.head_dim) as u32),
            None => (&s.attn, self.sizes.attn_stride as u32),
        };
        // Or quantized into the integer-dot matvec's input, where o reads it so.
        let q8_out = self.attn_q8_output(i, shape);
        let (q8_words, q8_blocks) = k::act_q8_strides((c.heads * c.head_dim) as u32);
        let (oq, od) = match q8_out {
            Some((xq, xd)) => (xq.slice(..), xd.slice(..)),
            None => (out.slice(..), out.slice(..)),
        };
        let (apart, atick) = match &p.attn_scratch {
            Some((part, tick)) => (part.slice(..), tick.slice(..)),
            None => (out.slice(..), out.slice(..)),
        };
        let mut bindings = vec![
            p.rows.slice(..),
            p.table.slice(..),
            qd.0.slice(qd.1 * 4..),
            l.k_cache.slice(..),
            l.v_cache.slice(..),
            out.slice(..),
            l.k_cache.slice(..),
            l.v_cache.slice(..),
            oq,
            od,
            apart,
            atick,
        ];
        let pipeline = match fold {
            Some(desc) => {
                bindings.extend([
                    kd.0.slice(kd.1 * 4..),
                    vd.0.slice(vd.1 * 4..),
                    qn.slice(..),
                    kn.slice(..),
                    bias,
                    freq,
                ]);
                self.device.pipeline(desc)?
            }
            None => p.attention.clone(),
        };
        enc.dispatch(
            &pipeline,
            [p.attention_groups, n, p.attn_z.get()],
            &bindings,
            &k::BatchAttnPush {
                heads: c.heads as u32,
                kv_heads: c.kv_heads as u32,
                head_dim: c.head_dim as u32,
                capacity,
                q_stride: qd.2,
                o_stride,
                scale: 1.0 / (c.head_dim as f32).sqrt(),
                block,
                max_blocks,
                out_f16: f16_out.is_some() as u32,
                q8: q8_out.is_some() as u32,
                q8_words,
                q8_blocks,
                chunk: p.attn_chunk,
                splits: p.attn_splits,
                rope_flags: self.rope_flags(),
                eps: c.rms_eps,
                theta: c.rope_theta,
                k_stride: kd.2,
                v_stride: vd.2,
            },
        )
    }

    /// The per-row argmax into the results buffer.
    pub(super) fn lower_paged_next(&self, enc: &mut Encoder, shape: Shape) -> sluice::Result<()> {
        let p = self.paged.as_ref().expect("checked by encode_batch");
        let (logits, rows) = match shape {
            Shape::Batch(n) => (&p.logits, n),
            _ => (&self.logits, 1),
        };
        enc.set_label("batch.argmax");
        let vocab = self.config.vocab as u32;
        // About ARGMAX_ROWS_WORKGROUPS in all (one wave): fewer per row as rows grow. The
        // pick does not depend on the split, so a row's token stays batch-invariant.
        let groups = (ARGMAX_ROWS_WORKGROUPS / rows.max(1)).clamp(1, argmax_groups(&self.config));
        enc.dispatch(
            &p.argmax,
            [groups, rows, 1],
            &[
                logits.slice(..),
                p.results.slice(..),
                p.argmax_scratch.slice(..),
            ],
            &k::ArgmaxRowsPush {
                vocab,
                stride: vocab,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Engines of the given slots for a model.
    fn engine(sequences: usize) -> PagedOptions {
        PagedOptions {
            max_rows: sequences,
            sequences,
            seq_context: 256,
            block: DEFAULT_KV_BLOCK,
        }
    }

    /// The split attention's partials hold a vec4 per value where the grouped-query
    /// kernel runs (qwen3-4b: four query heads per key/value head), one float otherwise.
    #[test]
    fn attention_partials_are_sized_for_the_kernel_the_model_runs() {
        for (name, lanes) in [("qwen3-4b", 4u64), ("qwen3-0.6b", 1)] {
            let c = ModelConfig::synthetic(name).unwrap();
            let (_, groups) =
                k::batch_attention_kernel(c.heads as u32, c.kv_heads as u32, c.head_dim as u32);
            let (floats, tickets) = attention_scratch(&c, 64, groups, 8).unwrap().unwrap();
            let cells = 64 * groups as u64;
            assert_eq!(tickets, cells, "{name}");
            assert_eq!(
                floats,
                cells * 8 * (c.head_dim as u64 + 2) * lanes,
                "{name}"
            );
        }
        let c = ModelConfig::synthetic("qwen3-0.6b").unwrap();
        assert_eq!(attention_scratch(&c, 64, 16, 1).unwrap(), None);
    }

    #[test]
    fn power_buckets_are_the_padded_counts() {
        assert_eq!(power_buckets(0), Vec::<usize>::new());
        assert_eq!(power_buckets(1), [1]);
        assert_eq!(power_buckets(8), [1, 2, 4, 8]);
        assert_eq!(power_buckets(48), [1, 2, 4, 8, 16, 32, 48]);
        for max in 1..=70usize {
            let want: Vec<usize> =
                (1..=max)
                    .map(|n| n.next_power_of_two().min(max))
                    .fold(Vec::new(), |mut v, b| {
                        if v.last() != Some(&b) {
                            v.push(b);
                        }
                        v
                    });
            assert_eq!(power_buckets(max), want, "{max}");
        }
    }

    /// Engines of up to 16 slots split long contexts by default, larger ones do not; an
    /// explicit length wins, 0 turns splitting off.
    #[test]
    fn attention_splits_by_default_only_in_small_engines() {
        assert_eq!(
            engine(1).attention_split(None),
            Some(k::BATCH_ATTENTION_SPLIT)
        );
        assert_eq!(
            engine(16).attention_split(None),
            Some(k::BATCH_ATTENTION_SPLIT)
        );
        assert_eq!(engine(17).attention_split(None), None);
        assert_eq!(engine(64).attention_split(Some(256)), Some(256));
        assert_eq!(engine(8).attention_split(Some(0)), None);
    }

    /// A paged engine allocates its layout (by the allocator's own count, up to each
    /// buffer's alignment), and the memory check before loading counts at least that
    /// layout and the matrix-unit scratch, for one to three qkv runs, with split
    /// attention.
    #[test]
    fn memory_check_counts_every_paged_buffer() {
        let d = sluice::testing::test_device();
        let _guard = sluice::testing::ValidationGuard::new(&d);
        let opts = PagedOptions {
            max_rows: 24,
            sequences: 8,
            seq_context: 1024,
            block: DEFAULT_KV_BLOCK,
        };
        let (rows_cap, split) = (40, Some(64));
        for name in ["tiny", "tiny-gqa", "tiny-gqa128"] {
            let c = ModelConfig::synthetic(name).unwrap();
            let o = super::super::GpuOptions {
                context: 4096,
                prefill_chunk: rows_cap,
                paged: Some(opts.clone()),
                batch_attention_split: split,
                ..Default::default()
            };
            let plain = Sizes::new(&c, o.context, rows_cap, o.attention_chunk).unwrap();
            let counted = Sizes::for_options(&c, &o).unwrap().total - plain.total;
            for qkv_runs in 1..=3 {
                let f = PagedFeatures {
                    int_dot: d.info().int_dot,
                    qkv_runs,
                };
                let lay = PagedLayout::new(&c, &opts, rows_cap, f, split).unwrap();
                assert!(lay.attn_splits > 1 && lay.attn_part > 0, "{lay:?}");
                let before = d.allocated_bytes();
                let p = Paged::new(&d, &c, opts.clone(), rows_cap, qkv_runs, split).unwrap();
                let made = d.allocated_bytes() - before;
                let want = lay.total().unwrap();
                // Each of at most 13 buffers rounded up to its alignment.
                assert!(
                    (want..=want + 13 * 256).contains(&made),
                    "{name} {f:?}: allocated {made} bytes, layout {want}"
                );
                let mu = super::super::mu::MuLayout::new(&c, rows_cap, qkv_runs).unwrap();
                let want = want + mu.total().unwrap();
                assert!(want <= counted, "{name} {f:?}: {want} > {counted} counted");
                assert_eq!(p.qkv_side.is_some(), qkv_runs > 1);
            }
        }
    }

    /// Decode rows on the matrix units: from 64 slots for every model, from 32 for models
    /// with large layers (qwen3-4b), not for small ones (qwen3-0.6b) or small engines.
    #[test]
    fn decode_rows_move_to_the_matrix_units_by_slots_and_layer_size() {
        let small = ModelConfig::synthetic("qwen3-0.6b").unwrap();
        let large = ModelConfig::synthetic("qwen3-4b").unwrap();
        let (s, l) = (
            small.layer_projection_weights(),
            large.layer_projection_weights(),
        );
        // q 2048 + k, v 1024 each from hidden 1024, o back, gate/up/down over 3072.
        assert_eq!(s, 1024 * 4096 + 2048 * 1024 + 3 * 1024 * 3072);
        assert!(s < BLOCK_ROWS_LARGE_LAYER_WEIGHTS && l >= BLOCK_ROWS_LARGE_LAYER_WEIGHTS);
        for (slots, small_cm, large_cm) in [
            (1, false, false),
            (7, false, false),
            (8, false, true),
            (16, false, true),
            (31, false, true),
            (32, true, true),
            (64, true, true),
        ] {
            let e = engine(slots);
            assert_eq!(
                e.block_rows_on_matrix_units(s),
                small_cm,
                "{slots} slots, 0.6b"
            );
            assert_eq!(
                e.block_rows_on_matrix_units(l),
                large_cm,
                "{slots} slots, 4b"
            );
        }
    }
}
