//! Many sequences decoding together over the paged KV cache (see [`crate::gpu::paged`]):
//! [`KvPool`] hands out blocks, [`BatchRunner`] owns sequence slots and runs batched steps
//! (recorded once per row-count bucket and attention depth, and replayed, like the
//! single-sequence [`crate::decode::Decoder`]). Padding rows fill a step up to its bucket;
//! they belong to the padding slot and write only to the reserved block 0.

use std::collections::HashMap;

use sluice::graph::{GraphOptions, Replay};
pub use sluice_kernels::TokenResult;

use crate::decode::Mode;
use crate::error::LlmError;
use crate::gpu::{BatchRow, GpuModel};

/// Free list of KV blocks `1..blocks` (block 0 is the padding rows' scratch).
#[derive(Debug)]
pub struct KvPool {
    free: Vec<u32>,
    blocks: usize,
    block: usize,
}

impl KvPool {
    /// A pool of `blocks` blocks of `block` positions.
    pub fn new(blocks: usize, block: usize) -> KvPool {
        // Lowest ids first out: pop from the end.
        let free = (1..blocks as u32).rev().collect();
        KvPool {
            free,
            blocks,
            block,
        }
    }

    /// Takes a free block.
    pub fn alloc(&mut self) -> Result<u32, LlmError> {
        self.free.pop().ok_or(LlmError::KvPoolFull {
            in_use: self.in_use(),
            total: self.blocks - 1,
            block: self.block,
        })
    }

    /// Returns blocks to the pool.
    pub fn release(&mut self, ids: impl IntoIterator<Item = u32>) {
        self.free.extend(ids);
    }

    /// Blocks held by sequences.
    pub fn in_use(&self) -> usize {
        self.blocks - 1 - self.free.len()
    }

    /// Blocks sequences can hold in all.
    pub fn capacity(&self) -> usize {
        self.blocks - 1
    }

    /// Positions per block.
    pub fn block(&self) -> usize {
        self.block
    }
}

/// A sequence slot's blocks.
#[derive(Debug, Default)]
struct Slot {
    blocks: Vec<u32>,
}

/// Sequence slots over a model loaded with a paged KV cache, and its batched steps.
pub struct BatchRunner<'m> {
    model: &'m GpuModel,
    mode: Mode,
    graph: GraphOptions,
    pool: KvPool,
    slots: Vec<Option<Slot>>,
    /// Recorded steps by (row bucket, prompt chunk, decode-only with batch_rope folded
    /// into the attention, attention depth).
    replays: HashMap<(usize, bool, bool, usize), Replay>,
    /// Whether steps with logits for every row may carry prompt rows (then unfolded; see
    /// [`BatchRunner::set_prompt_rows`]).
    prompt_rows: bool,
}

impl<'m> BatchRunner<'m> {
    /// A runner over `model` (loaded with `GpuOptions::paged`).
    pub fn new(
        model: &'m GpuModel,
        mode: Mode,
        graph: GraphOptions,
    ) -> Result<BatchRunner<'m>, LlmError> {
        let p = model.paged_options().ok_or_else(|| {
            LlmError::InvalidArgument(
                "batched decode needs a model loaded with a paged KV cache".into(),
            )
        })?;
        Ok(BatchRunner {
            model,
            mode,
            graph,
            pool: KvPool::new(model.context() / p.block, p.block),
            slots: (0..p.sequences).map(|_| None).collect(),
            replays: HashMap::new(),
            prompt_rows: true,
        })
    }

    /// Says whether steps with logits for every row may carry prompt rows (default true):
    /// where they may not (prompts only as chunks of their own), [`BatchRunner::record_ahead`]
    /// records those steps only in their decode-only form. A step that carries prompt rows
    /// anyway is recorded when it first runs.
    pub fn set_prompt_rows(&mut self, may: bool) {
        self.prompt_rows = may;
    }

    /// The model.
    pub fn model(&self) -> &GpuModel {
        self.model
    }

    /// The block pool.
    pub fn pool(&self) -> &KvPool {
        &self.pool
    }

    /// Positions one sequence may hold.
    pub fn seq_context(&self) -> usize {
        self.model.paged_options().map_or(0, |p| p.seq_context)
    }

    /// Sequence slots in all.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Rows one step with logits for every row takes at most.
    pub fn max_rows(&self) -> usize {
        self.model.batch_rows_max(false)
    }

    /// Rows one step's projections take per pass over the weights (see
    /// [`GpuModel::batch_row_group`]).
    pub fn row_group(&self) -> usize {
        self.model.batch_row_group().max(1)
    }

    /// Rows one prompt chunk (logits for its last row) takes at most.
    pub fn max_prefill_rows(&self) -> usize {
        self.model.batch_rows_max(true)
    }

    /// Row counts a step of `last_only` kind is padded to (its recordings' buckets):
    /// powers of two below the most rows, and the most.
    pub fn row_buckets(&self, last_only: bool) -> Vec<usize> {
        crate::gpu::power_buckets(self.model.batch_rows_max(last_only))
    }

    /// Records ahead every step of `last_only` kind this runner can take (each row bucket
    /// at each attention depth, [`GpuModel::batch_attention_depths`]; steps with logits for
    /// every row also in their decode-only form where the model folds batch_rope into the
    /// attention, [`GpuModel::batch_rope_folds`], and only in that form where they carry no
    /// prompt rows, [`BatchRunner::set_prompt_rows`]) that is not recorded yet, so that no
    /// step later waits for its recording (and the first for the pipelines);
    /// `progress(done, total)` after each. Replay mode only (`Direct` records every step
    /// anyway: returns 0). Returns the recordings made.
    pub fn record_ahead(
        &mut self,
        last_only: bool,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<usize, LlmError> {
        if self.mode == Mode::Direct {
            return Ok(0);
        }
        let depths = self.model.batch_attention_depths();
        let folds: &[bool] = match (last_only, self.model.batch_rope_folds()) {
            (false, true) if self.prompt_rows => &[false, true],
            (false, true) => &[true],
            _ => &[false],
        };
        let mut keys: Vec<(usize, bool, bool, usize)> = Vec::new();
        for n in self.row_buckets(last_only) {
            for &f in folds {
                keys.extend(depths.iter().map(|&d| (n, last_only, f, d)));
            }
        }
        keys.retain(|k| !self.replays.contains_key(k));
        for (i, &key) in keys.iter().enumerate() {
            self.model.set_batch_decode_only(key.2);
            self.model.set_batch_attention_depth(key.3);
            let replay = self.record(key.0, last_only)?;
            self.replays.insert(key, replay);
            progress(i + 1, keys.len());
        }
        Ok(keys.len())
    }

    /// Steps recorded so far (row bucket, prompt chunk or not, decode-only or not,
    /// attention depth).
    pub fn recordings(&self) -> usize {
        self.replays.len()
    }

    /// A batched step over `n` rows, recorded at the model's current attention depth.
    fn record(&self, n: usize, last_only: bool) -> Result<Replay, LlmError> {
        let mut cap = self.model.device().capture();
        self.model.encode_batch(&mut cap, n, last_only)?;
        let mut graph = cap.finish_capture()?;
        graph.optimize(self.graph);
        Ok(graph.record()?)
    }

    /// Opens a sequence slot (no blocks yet).
    pub fn open(&mut self) -> Result<u32, LlmError> {
        let i = self.slots.iter().position(|s| s.is_none()).ok_or_else(|| {
            LlmError::InvalidArgument(format!(
                "all {} sequence slots are in use",
                self.slots.len()
            ))
        })?;
        self.slots[i] = Some(Slot::default());
        Ok(i as u32)
    }

    /// Closes a slot and returns its blocks to the pool (no-op for a closed slot).
    pub fn close(&mut self, slot: u32) {
        if let Some(s) = self.slots.get_mut(slot as usize).and_then(Option::take) {
            self.pool.release(s.blocks);
        }
    }

    /// Makes positions `0..len` of `slot` backed by blocks (allocating and writing its
    /// table row when it grows). On a full pool the slot keeps what it had.
    pub fn reserve(&mut self, slot: u32, len: usize) -> Result<(), LlmError> {
        let seq_context = self.seq_context();
        if len > seq_context {
            return Err(LlmError::ContextFull {
                context: seq_context,
            });
        }
        let block = self.pool.block();
        let s = self
            .slots
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .ok_or_else(|| {
                LlmError::InvalidArgument(format!("sequence slot {slot} is not open"))
            })?;
        let need = len.div_ceil(block);
        if need <= s.blocks.len() {
            return Ok(());
        }
        let mut new = Vec::with_capacity(need - s.blocks.len());
        while s.blocks.len() + new.len() < need {
            match self.pool.alloc() {
                Ok(b) => new.push(b),
                Err(e) => {
                    self.pool.release(new);
                    return Err(e);
                }
            }
        }
        s.blocks.extend(new);
        self.model.set_block_table(slot as usize, &s.blocks)
    }

    /// Runs one batched step over `rows` (each slot reserved past the row's position) and
    /// returns one result per row: logits and argmax for every row, or (`last_only`) for
    /// the last row only (one result).
    pub fn step(
        &mut self,
        rows: &[BatchRow],
        last_only: bool,
    ) -> Result<Vec<TokenResult>, LlmError> {
        let max = self.model.batch_rows_max(last_only);
        if rows.is_empty() || rows.len() > max {
            return Err(LlmError::InvalidArgument(format!(
                "batched step of {} rows (1..={max})",
                rows.len()
            )));
        }
        let pad_slot = self.slots.len() as u32;
        let block = self.pool.block();
        for r in rows {
            let held = self
                .slots
                .get(r.slot as usize)
                .and_then(Option::as_ref)
                .map_or(0, |s| s.blocks.len() * block);
            if r.pos as usize >= held {
                return Err(LlmError::InvalidArgument(format!(
                    "row at position {} of slot {} has no KV block (reserve first)",
                    r.pos, r.slot
                )));
            }
        }
        // Pad to a bucket (powers of two) so few recordings cover every batch size; for a
        // prompt chunk the real rows must stay last (its logits are the last row's).
        let n = rows.len().next_power_of_two().min(max);
        let pad = BatchRow {
            token: 0,
            pos: 0,
            slot: pad_slot,
        };
        let mut all = Vec::with_capacity(n);
        if last_only {
            all.resize(n - rows.len(), pad);
            all.extend_from_slice(rows);
        } else {
            all.extend_from_slice(rows);
            all.resize(n, pad);
        }
        self.model.set_batch_rows(&all)?;
        match self.mode {
            Mode::Direct => {
                let mut enc = self.model.device().encoder()?;
                self.model.encode_batch(&mut enc, n, last_only)?;
                enc.submit()?;
            }
            Mode::Replay => {
                // The attention's depth follows the longest context, batch_rope's fold
                // the rows (one per sequence or not): one recording per (rows, prompt or
                // not, folded or not, depth).
                let fold = !last_only && self.model.batch_rope_folded();
                let key = (n, last_only, fold, self.model.batch_attention_depth());
                if !self.replays.contains_key(&key) {
                    let replay = self.record(n, last_only)?;
                    self.replays.insert(key, replay);
                }
                self.replays[&key].submit()?;
            }
        }
        let results = self
            .model
            .batch_results(if last_only { 1 } else { rows.len() })?;
        Ok(results)
    }

    /// One decode step for `seqs` = (slot, token, position) each: reserves every slot
    /// past its position, then runs the batched step; one result per sequence, in order.
    pub fn decode(&mut self, seqs: &[(u32, u32, usize)]) -> Result<Vec<TokenResult>, LlmError> {
        for &(slot, _, pos) in seqs {
            self.reserve(slot, pos + 1)?;
        }
        let rows: Vec<BatchRow> = seqs
            .iter()
            .map(|&(slot, token, pos)| BatchRow {
                token,
                pos: pos as u32,
                slot,
            })
            .collect();
        self.step(&rows, false)
    }

    /// Logits of row `row` of the last step (its last row for a `last_only` step).
    pub fn logits(&self, row: usize, last_only: bool) -> Result<Vec<f32>, LlmError> {
        self.model.batch_logits(row, last_only)
    }

    /// Feeds `prompt` into `slot` from position 0 in chunks and returns the last chunk's
    /// result (the first generated token by argmax).
    pub fn prefill(&mut self, slot: u32, prompt: &[u32]) -> Result<TokenResult, LlmError> {
        if prompt.is_empty() {
            return Err(LlmError::InvalidArgument("empty prompt".into()));
        }
        self.reserve(slot, prompt.len())?;
        let chunk = self.max_prefill_rows();
        let mut last = None;
        for (c, part) in prompt.chunks(chunk).enumerate() {
            let rows: Vec<BatchRow> = part
                .iter()
                .enumerate()
                .map(|(i, &token)| BatchRow {
                    token,
                    pos: (c * chunk + i) as u32,
                    slot,
                })
                .collect();
            last = self.step(&rows, true)?.pop();
        }
        last.ok_or_else(|| LlmError::InvalidArgument("empty prompt".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_hands_out_and_takes_back_blocks() {
        let mut p = KvPool::new(4, 16);
        assert_eq!(p.capacity(), 3);
        let a = [p.alloc().unwrap(), p.alloc().unwrap(), p.alloc().unwrap()];
        assert_eq!(a, [1, 2, 3], "block 0 is never handed out");
        assert_eq!(p.in_use(), 3);
        let e = p.alloc().unwrap_err();
        assert!(
            matches!(
                e,
                LlmError::KvPoolFull {
                    in_use: 3,
                    total: 3,
                    block: 16
                }
            ),
            "{e}"
        );
        p.release([2]);
        assert_eq!(p.in_use(), 2);
        assert_eq!(p.alloc().unwrap(), 2);
    }
}
