//! The model on the GPU: weights in `ReadOnlyWeight` buffers (each matrix in its own
//! format), the KV cache in `AppendOnlyKv` buffers, per-token intermediates in
//! `TokenScratch`, logits and the next token in `PersistentOutput`, and the per-token values
//! (token id, position) in a small params buffer the kernels read — so a recorded step can
//! be replayed unchanged.
//!
//! Split by concern: [`layout`] (where things live, checked sizes), [`upload`] (weights to
//! the device), [`lower`] (the forward description of `crate::layer` lowered to dispatches
//! for decode and prefill). Every dispatch declares its accesses; the runtime's hazard
//! tracker places every barrier.

pub mod layout;
mod lower;
mod mu;
pub mod paged;
mod persistent;
mod upload;

use std::sync::Arc;

use sluice::{Buffer, Device, Pipeline};
use sluice_kernels::WeightDtype;

use crate::config::ModelConfig;
use crate::error::LlmError;
pub use layout::Matrix;
pub use lower::Shape;
pub(crate) use paged::power_buckets;
pub use paged::{
    BatchRow, PagedOptions, BATCH_ROW_GROUP_MAX, BLOCK_ROWS_LARGE_LAYER_WEIGHTS,
    BLOCK_ROWS_MATRIX_UNITS_MIN_SEQUENCES, BLOCK_ROWS_MATRIX_UNITS_MIN_SEQUENCES_LARGE,
    DEFAULT_KV_BLOCK,
};
pub use persistent::{Lowering, PersistentInfo};

/// Tensor data handed to the uploader: raw little-endian bytes of a dtype, or f32 values.
pub enum TensorData<'a> {
    /// Bytes as stored in a file (borrowed from the mapping) or generated, `[rows, cols]`
    /// row-major, unpadded.
    Raw {
        /// Element type of the bytes.
        dtype: WeightDtype,
        /// The bytes.
        bytes: std::borrow::Cow<'a, [u8]>,
    },
    /// f32 values, `[rows, cols]` row-major.
    F32(Vec<f32>),
}

/// How the GPU model is built.
#[derive(Clone, Debug)]
pub struct GpuOptions {
    /// KV-cache capacity in tokens (prompt + generated). Default 4352 (4096 + 256).
    pub context: usize,
    /// Fuse gate/up projections with SiLU·mul into one kernel. Default true.
    pub fuse_gate_up: bool,
    /// Most positions per attention workgroup (<= 256): the split of long contexts; short
    /// ones use fewer (`sluice_kernels::attention_chunk_for`). Default 256.
    pub attention_chunk: u32,
    /// Positions per split of a row's context at least in the batched step's attention
    /// (paged engines): a row of `len` positions runs as ceil(len / this) splits of about
    /// equal length, at most `sluice_kernels::BATCH_ATTENTION_MAX_SPLITS`, so a few rows
    /// of long contexts still fill the GPU; `Some(0)`: one split per row. Fixed per engine
    /// (a row's splits depend on its own context only: batch invariance). Default `None`:
    /// `sluice_kernels::BATCH_ATTENTION_SPLIT` in engines of up to
    /// `sluice_kernels::BATCH_ATTENTION_SPLIT_MAX_SEQUENCES` slots, one split in larger
    /// ones (whose rows fill the GPU already: splitting cost them 5-9%).
    pub batch_attention_split: Option<u32>,
    /// Fold each RMSNorm into the matvec that consumes it (qkv, gate/up, LM head): one
    /// dispatch and one barrier less per norm. Default true.
    pub fuse_norm: bool,
    /// Fold the q/k norm, rotary embedding and KV append into the attention kernel: one
    /// dispatch and one barrier less per layer. Default true. Decode only: a prefill chunk's
    /// keys must all be in the cache before any of its queries attends, so prefill always
    /// appends first. In paged engines the same holds for batched steps: those whose rows
    /// are one per sequence fold batch_rope into the attention
    /// (`sluice_kernels::batch_attention_rope_kernel`, bit for bit the unfused step), those
    /// carrying prompt rows keep it.
    pub fuse_attention: bool,
    /// Fold the greedy pick (argmax, the token into the ring, the position advanced) into
    /// the LM head, one dispatch and one barrier less per greedy single-sequence step, where
    /// the head has its norm folded in and runs on a resident grid (`None`, the default:
    /// devices that report their multiprocessors; 0.6B heads on the H100 gained 7-9 µs);
    /// `Some(true)`: also on a full grid of at most `sluice_kernels::HEAD_PICK_FULL_GRID_MAX`
    /// workgroups (small vocabularies; lavapipe, whose workgroup barriers are dear, ran such
    /// a head + pick slower than head then argmax, so only tests ask for it there);
    /// `Some(false)`: never.
    pub fuse_pick: Option<bool>,
    /// Integer-dot decode of block formats: the fused gate/up also writes its output
    /// quantized to int8 blocks of 32 (bit for bit what down's kernel made of it), so down
    /// skips quantizing its input, and the fused attention does the same for o where that
    /// pays (docs/decisions/0007); in batched engines whose decode rows run on integer dot
    /// products the attention writes o's input so and the gate/up down's (their `act_q8`
    /// dispatches go). Default true; off for A/B (`--no-q8-handoff`).
    pub q8_handoff: bool,
    /// Single-sequence decode on integer dot products: a layer whose q|k and v have two
    /// block formats (llama.cpp's K_M mixtures: Q4_K or Q5_K and Q6_K) runs its q|k|v as
    /// one dispatch (`sluice_kernels::matvec_norm_two`, norm folded in) instead of one per
    /// format. Default true; off for A/B (`--no-two-format-qkv`).
    pub two_format_qkv: bool,
    /// Threads per output row in the matvec kernels (32, 64, 128 or 256); `None` picks by
    /// row length (`sluice_kernels::matvec_threads_per_row`). Default `None`.
    pub matvec_threads_per_row: Option<u32>,
    /// Prompt tokens per prefill chunk (each dispatch of a chunk covers all of its tokens;
    /// the projections are matrix-matrix products). Default 512.
    pub prefill_chunk: usize,
    /// A single-sequence model's prefill chunks on the matrix units, where the device has
    /// them (decision 0017): the projections on the batched engine's matrix-unit matvecs
    /// (`act_f16`, then the staged and register-built kernels, K split where matrices have
    /// few rows) instead of the prefill matmul family, and for heads of 128 dims the
    /// attention on cooperative matrices (`sluice_kernels::ATTENTION_PREFILL_CM`) instead
    /// of the scalar flash attention. Elsewhere the tiled matmul and the scalar attention.
    /// Default true; off for A/B (`--no-prefill-matrix-units`).
    pub prefill_matrix_units: bool,
    /// Sample the next token on the GPU with these settings instead of taking the argmax
    /// (the token still stays on the GPU, so replayed steps queue back to back). Default
    /// `None`: greedy.
    pub sampling: Option<crate::sampler::Sampling>,
    /// A paged KV cache and the batched step (many sequences per dispatch): `context` is
    /// then the pool of positions all sequences share. Default `None`.
    pub paged: Option<PagedOptions>,
    /// How decode steps are lowered: one dispatch per op behind pipeline barriers, one
    /// persistent dispatch per layer (layers whose matrices share one format, f16 or a
    /// block format, and the Q4_K_M / Q5_K_M mixtures' layers; fusions on), or per step
    /// whichever of the two is faster there.
    /// Default [`Lowering::Auto`].
    pub lowering: Lowering,
    /// Workgroups of each persistent layer dispatch; `None`: the device's residency bound
    /// (one per multiprocessor where the driver reports them, else 1). More than that bound
    /// is refused. Default `None`.
    pub persistent_groups: Option<u32>,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            context: 4352,
            fuse_gate_up: true,
            attention_chunk: 256,
            batch_attention_split: None,
            fuse_norm: true,
            fuse_attention: true,
            fuse_pick: None,
            q8_handoff: true,
            two_format_qkv: true,
            matvec_threads_per_row: None,
            prefill_chunk: 512,
            prefill_matrix_units: true,
            sampling: None,
            paged: None,
            lowering: Lowering::Auto,
            persistent_groups: None,
        }
    }
}

/// The q, k and v projections of a layer: one stacked matrix when they share a format,
/// else one per run of consecutive parts in one format (written to their rows of the qkv
/// activation).
pub(crate) enum Qkv {
    /// `[q; k; v]` rows, each block padded to `QKV_ALIGN` rows.
    Stacked(Matrix),
    /// Runs of parts in one format, stacked as above, each with the first qkv row it
    /// writes (formats differ, as in llama.cpp's Q4_K_M mixture: q and k in Q4_K, v in
    /// Q6_K in some layers: two dispatches instead of three).
    Split(Vec<(Matrix, u64)>),
}

impl Qkv {
    /// The matrices, in row order.
    pub fn matrices(&self) -> impl Iterator<Item = &Matrix> {
        let (stacked, runs) = match self {
            Qkv::Stacked(m) => (Some(m), &[][..]),
            Qkv::Split(ms) => (None, &ms[..]),
        };
        stacked.into_iter().chain(runs.iter().map(|(m, _)| m))
    }

    /// Runs of parts (one per format; 1 when stacked).
    pub fn runs(&self) -> usize {
        match self {
            Qkv::Stacked(_) => 1,
            Qkv::Split(ms) => ms.len(),
        }
    }

    /// The first qkv row of the second run, where the parts are split: a batched step
    /// writes the rows from there on to their own buffer (`Paged::qkv_side`).
    pub fn side_first(&self) -> Option<u64> {
        match self {
            Qkv::Split(ms) if ms.len() > 1 => Some(ms[1].1),
            _ => None,
        }
    }
}

pub(crate) struct Layer {
    pub attn_norm: Buffer,
    pub qkv: Qkv,
    pub o: Matrix,
    pub q_norm: Option<Buffer>,
    pub k_norm: Option<Buffer>,
    /// q, k and v biases packed `[q | k | v]` (Qwen2).
    pub qkv_bias: Option<Buffer>,
    pub mlp_norm: Buffer,
    pub gate: Matrix,
    pub up: Matrix,
    pub down: Matrix,
    pub k_cache: Buffer,
    pub v_cache: Buffer,
}

/// Per-token activations; each holds a whole prefill chunk (token t at t * stride).
pub(crate) struct Scratch {
    pub x: Buffer,
    pub xn: Buffer,
    /// q | k | v outputs, laid out like the stacked matrix's rows.
    pub qkv: Buffer,
    pub attn: Buffer,
    /// Split-attention partials (decode), merged in the same dispatch.
    pub partial: Buffer,
    /// Ticket counters of split attention, one u32 per query head: zero between dispatches.
    pub attn_counters: Buffer,
    /// The multi-workgroup argmax's (or the LM head's greedy pick's) ticket word and
    /// per-workgroup bests (`sluice_kernels::greedy_scratch_words`).
    pub argmax_scratch: Buffer,
    pub h: Buffer,
    pub g: Buffer,
    pub u: Buffer,
    /// Stand-in for the q/k norm weights, biases and RoPE multipliers of models without
    /// them (bound, never read: the kernels' flags say so).
    pub ones: Buffer,
}

/// Pipelines that do not depend on a weight format.
pub(crate) struct Kernels {
    pub rmsnorm: Arc<Pipeline>,
    pub qk_rope: Arc<Pipeline>,
    pub attn_split: Arc<Pipeline>,
    pub attn_rope: Arc<Pipeline>,
    /// The greedy pick with the step's end (position advance) folded in.
    pub argmax_advance: Arc<Pipeline>,
    pub sample: Arc<Pipeline>,
    pub silu_mul: Arc<Pipeline>,
    pub advance: Arc<Pipeline>,
    /// The prefill attention (`sluice_kernels::attention_prefill_kernel`).
    pub attn_prefill: Arc<Pipeline>,
    /// Queries a workgroup of `attn_prefill` takes.
    pub attn_prefill_queries: u32,
}

/// A model resident on the GPU, ready to decode.
pub struct GpuModel {
    device: Device,
    config: ModelConfig,
    options: GpuOptions,
    kernels: Kernels,
    /// Prefill matmuls run on cooperative matrices (checked against the tiled kernel once
    /// at load).
    coopmat: bool,
    /// The matrix-unit matvecs build their weights' operands in registers (f16 LM heads,
    /// Q4_K and Q6_K; decision 0014; the device's element layout checked once at load).
    cmd_layout: bool,
    /// A single sequence's prefill chunks run their f16 matrices as tiled matmuls where
    /// enough tiles fill the GPU (`sluice_kernels::matmul_tile_prefill`): matrix units and
    /// not `Options::no_tiled_matmul`.
    tiled: bool,
    /// Scratch of the matrix-unit matvecs (paged engines, and prefill chunks with
    /// [`GpuOptions::prefill_matrix_units`]); `None` without matrix units.
    mu: Option<mu::MuScratch>,
    sizes: layout::Sizes,
    embed: layout::Table,
    layers: Vec<Layer>,
    final_norm: Buffer,
    /// Multipliers of each RoPE pair's inv_freq (models with RoPE scaling).
    rope_freq: Option<Buffer>,
    lm_head: Option<layout::Table>,
    scratch: Scratch,
    /// `[token, pos, seq_len, 0]` as u32, then the prompt tokens of a prefill chunk.
    params: Buffer,
    /// Logits of the last step, f32 `[vocab]`. Device-local scratch: the host reads them
    /// (sampling, parity) through a copy, which beats uncached reads of BAR memory.
    logits: Buffer,
    /// `(index: u32, value: f32)` of the last step's argmax.
    result: Buffer,
    /// Token ring: `tokens[pos]` is the token at position `pos` chosen on the GPU.
    tokens: Buffer,
    /// The paged KV cache's table and the batched step's buffers (`options.paged`).
    paged: Option<paged::Paged>,
    /// The persistent lowering of decode steps (`options.lowering`).
    persistent: Option<persistent::Persistent>,
}

impl GpuModel {
    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The device it lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// KV-cache capacity in tokens.
    pub fn context(&self) -> usize {
        self.options.context
    }

    /// Bytes of weights read per decode step.
    pub fn weight_bytes(&self) -> u64 {
        let mut n = self.embed.row_bytes(); // one embedding row
        for l in &self.layers {
            n += l.qkv.matrices().map(|m| m.bytes).sum::<u64>();
            n += [&l.o, &l.gate, &l.up, &l.down]
                .iter()
                .map(|m| m.bytes)
                .sum::<u64>();
        }
        n + self.head().bytes()
    }

    /// Writes the per-token params: the input token and its position.
    pub fn set_params(&self, token: u32, pos: usize) -> Result<(), LlmError> {
        if pos >= self.options.context {
            return Err(LlmError::ContextFull {
                context: self.options.context,
            });
        }
        if token as usize >= self.config.vocab {
            return Err(LlmError::InvalidArgument(format!(
                "token id {token} is outside the vocabulary of {}",
                self.config.vocab
            )));
        }
        self.params
            .write(0, &[token, pos as u32, pos as u32 + 1, 0])?;
        self.clear_result()
    }

    /// How many parts the embedding table and the LM head are stored in (1: one binding
    /// each; more where a table is larger than the device binds at once).
    pub fn table_parts(&self) -> (usize, usize) {
        (self.embed.parts.len(), self.head().parts.len())
    }

    /// The LM head (the embedding when tied), in parts where it is larger than one binding.
    fn head(&self) -> &layout::Table {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }

    /// Whether prefill matmuls use the device's matrix units (cooperative matrices).
    pub fn uses_coopmat(&self) -> bool {
        self.coopmat
    }

    /// Weight formats of the model's matrices, with the number of matrices of each.
    pub fn weight_formats(&self) -> Vec<(WeightDtype, usize)> {
        let mut v: Vec<(WeightDtype, usize)> = Vec::new();
        let mut add = |d: WeightDtype| match v.iter_mut().find(|(x, _)| *x == d) {
            Some((_, n)) => *n += 1,
            None => v.push((d, 1)),
        };
        add(self.embed.dtype());
        for l in &self.layers {
            l.qkv.matrices().for_each(|m| add(m.dtype));
            [&l.o, &l.gate, &l.up, &l.down]
                .iter()
                .for_each(|m| add(m.dtype));
        }
        if let Some(h) = &self.lm_head {
            add(h.dtype());
        }
        v
    }

    /// Records one decode step (params must hold the token and position): logits, the next
    /// token into the result buffer and `params.token`, the position advanced by one.
    /// The lowering is the one position 0 gets (see [`GpuModel::encode_step_at`]).
    pub fn encode_step(&self, enc: &mut sluice::Encoder) -> sluice::Result<()> {
        self.encode_step_at(enc, 0)
    }

    /// Records one decode step with the persistent lowering (when the model has it and
    /// `persistent`) or the barrier lowering.
    pub fn encode_step_lowered(
        &self,
        enc: &mut sluice::Encoder,
        persistent: bool,
    ) -> sluice::Result<()> {
        self.encode_lowered(enc, Shape::Decode, persistent && self.persistent.is_some())
    }

    /// Records one decode step for a token at `pos` with the lowering the model's
    /// [`Lowering`] picks there ([`GpuModel::persistent_at`]).
    pub fn encode_step_at(&self, enc: &mut sluice::Encoder, pos: usize) -> sluice::Result<()> {
        self.encode_lowered(enc, Shape::Decode, self.persistent_at(pos))
    }

    /// Records the prefill of `n` prompt tokens (in the params buffer, see
    /// [`GpuModel::set_prefill_params`]): every op covers all `n` tokens; the logits and
    /// the next token are the last token's and the position advances by `n`.
    pub fn encode_prefill(&self, enc: &mut sluice::Encoder, n: usize) -> sluice::Result<()> {
        let n = u32::try_from(n)
            .ok()
            .filter(|&n| n >= 1 && n as usize <= self.prefill_chunk())
            .ok_or_else(|| {
                sluice::Error::InvalidUse(format!(
                    "prefill of {n} tokens: the model takes 1..={} per chunk",
                    self.prefill_chunk()
                ))
            })?;
        self.encode(enc, Shape::Prefill(n))
    }

    /// Whether the next token is sampled on the GPU (else it is the argmax).
    pub fn samples_on_gpu(&self) -> bool {
        self.options.sampling.is_some_and(|s| !s.is_greedy())
    }

    /// Prompt tokens per prefill chunk.
    pub fn prefill_chunk(&self) -> usize {
        self.options.prefill_chunk.max(1)
    }

    /// Writes the params for a prefill chunk: `tokens` at positions `pos..`.
    pub fn set_prefill_params(&self, tokens: &[u32], pos: usize) -> Result<(), LlmError> {
        if tokens.is_empty() || tokens.len() > self.prefill_chunk() {
            return Err(LlmError::InvalidArgument(format!(
                "prefill chunk of {} tokens (1..={})",
                tokens.len(),
                self.prefill_chunk()
            )));
        }
        if pos + tokens.len() > self.options.context {
            return Err(LlmError::ContextFull {
                context: self.options.context,
            });
        }
        if let Some(t) = tokens.iter().find(|&&t| t as usize >= self.config.vocab) {
            return Err(LlmError::InvalidArgument(format!(
                "token id {t} is outside the vocabulary of {}",
                self.config.vocab
            )));
        }
        let mut words = vec![tokens[0], pos as u32, pos as u32 + 1, 0];
        words.extend_from_slice(tokens);
        self.params.write(0, &words)?;
        self.clear_result()
    }

    /// Tokens the GPU chose for positions `from..to` (waits for their writers); an error
    /// when any step since the last params write had non-finite logits.
    pub fn gpu_tokens(&self, from: usize, to: usize) -> Result<Vec<u32>, LlmError> {
        if to > self.options.context || from > to {
            return Err(LlmError::ContextFull {
                context: self.options.context,
            });
        }
        let tokens = self.tokens.read::<u32>(from as u64 * 4, to - from)?;
        self.result()?;
        Ok(tokens)
    }

    /// Clears the sticky non-finite marker of the result (with new params).
    fn clear_result(&self) -> Result<(), LlmError> {
        self.result.write(8, &[0u32; 2])?;
        Ok(())
    }

    /// The last completed step's result (waits for it); an error naming the position when
    /// a step since the last params write had non-finite logits.
    pub fn result(&self) -> Result<sluice_kernels::TokenResult, LlmError> {
        let w = self.result.read::<u32>(0, 4)?;
        let r = sluice_kernels::TokenResult::from_words([w[0], w[1], w[2], w[3]]);
        if r.first_bad & sluice_kernels::PERSISTENT_ABORT_BIT != 0 {
            return Err(LlmError::PersistentStall {
                position: (r.first_bad & !sluice_kernels::PERSISTENT_ABORT_BIT) as usize - 1,
                groups: self.persistent_info().map_or(0, |p| p.groups),
            });
        }
        if r.first_bad > 0 {
            return Err(LlmError::NonFiniteLogits {
                position: r.first_bad as usize - 1,
                count: r.nonfinite,
            });
        }
        Ok(r)
    }

    /// Runs one step for `token` at `pos` and returns the greedy next token.
    pub fn step(&self, token: u32, pos: usize) -> Result<u32, LlmError> {
        self.set_params(token, pos)?;
        let mut enc = self.device.encoder()?;
        self.encode_step_at(&mut enc, pos)?;
        enc.submit()?;
        self.next_token()
    }

    /// The token the last completed step chose (waits for it); an error when its logits,
    /// or those of an earlier step since the last params write, were not finite.
    pub fn next_token(&self) -> Result<u32, LlmError> {
        Ok(self.result()?.index)
    }

    /// The logits of the last step (waits for it).
    pub fn logits(&self) -> Result<Vec<f32>, LlmError> {
        Ok(self.logits.read::<f32>(0, self.config.vocab)?)
    }
}
