//! [`BatchEngine`]: the [`Engine`] over the paged KV cache — every running sequence
//! advances in one batched step per token (continuous batching), and a new sequence's
//! prompt runs in chunks interleaved with those steps.
//!
//! One [`Engine::step`] is: at most one prompt chunk of the oldest sequence still in its
//! prompt (its first token comes when the last chunk ran), then one batched decode step
//! over every sequence past its prompt. A sequence's greedy tokens do not depend on the
//! others in the batch: the batched step's kernels reduce in a fixed order per row, and
//! the engine uses them for a batch of one too.

use sluice_llm::batch::BatchRunner;
use sluice_llm::gpu::BatchRow;
use sluice_llm::sampler::{Sampler, Sampling};
use sluice_llm::LlmError;

use crate::engine::{check_request, Engine, SeqId, StepResult};
use crate::error::{Result, ServeError};

struct Seq {
    id: SeqId,
    slot: u32,
    prompt: Vec<u32>,
    /// Prompt tokens already in the KV cache.
    fed: usize,
    /// The last token produced (input of the next decode step); `None` during the prompt.
    last: Option<u32>,
    /// Position of `last`.
    pos: usize,
    /// Host sampler when the request is not greedy.
    sampler: Option<Sampler>,
}

/// The continuous-batching engine over a [`BatchRunner`].
pub struct BatchEngine<'m> {
    runner: BatchRunner<'m>,
    /// Running sequences in admission order.
    seqs: Vec<Seq>,
    /// Prompt tokens per chunk.
    chunk: usize,
}

/// A failure of a step shared by several sequences, as an error each can own.
fn shared(e: &LlmError) -> ServeError {
    ServeError::Model(e.to_string())
}

impl<'m> BatchEngine<'m> {
    /// An engine over `runner` (a model loaded with a paged KV cache; argmax on the GPU,
    /// non-greedy requests sampled on the host).
    pub fn new(runner: BatchRunner<'m>) -> BatchEngine<'m> {
        let chunk = runner.max_prefill_rows().max(1);
        BatchEngine {
            runner,
            seqs: Vec::new(),
            chunk,
        }
    }

    /// The token of a row: the argmax, or the host sampler's pick from its logits.
    fn pick(
        runner: &BatchRunner<'_>,
        s: &mut Seq,
        r: &sluice_llm::batch::TokenResult,
        row: usize,
        last_only: bool,
    ) -> Result<u32> {
        if r.nonfinite > 0 {
            return Err(LlmError::NonFiniteLogits {
                position: s.pos,
                count: r.nonfinite,
            }
            .into());
        }
        match &mut s.sampler {
            Some(sampler) => Ok(sampler.sample(&runner.logits(row, last_only)?)?),
            None => Ok(r.index),
        }
    }

    /// One chunk of the oldest prompt still running; its first token when it completes.
    fn prefill_chunk(&mut self, out: &mut Vec<StepResult>) -> Option<SeqId> {
        let i = self.seqs.iter().position(|s| s.last.is_none())?;
        let s = &mut self.seqs[i];
        let end = (s.fed + self.chunk).min(s.prompt.len());
        let rows: Vec<BatchRow> = (s.fed..end)
            .map(|p| BatchRow {
                token: s.prompt[p],
                pos: p as u32,
                slot: s.slot,
            })
            .collect();
        let r = self
            .runner
            .reserve(s.slot, end)
            .and_then(|()| self.runner.step(&rows, true));
        let id = s.id;
        let r = match r {
            Ok(res) => {
                s.fed = end;
                if end < s.prompt.len() {
                    return None;
                }
                s.pos = end;
                Self::pick(&self.runner, s, &res[0], 0, true)
            }
            Err(e) => Err(e.into()),
        };
        match &r {
            Ok(t) => s.last = Some(*t),
            Err(_) => self.drop_seq(id),
        }
        out.push((id, r));
        Some(id)
    }

    fn drop_seq(&mut self, id: SeqId) {
        if let Some(i) = self.seqs.iter().position(|s| s.id == id) {
            let s = self.seqs.remove(i);
            self.runner.close(s.slot);
        }
    }

    /// One batched step over every sequence past its prompt (but `skip`).
    fn decode(&mut self, skip: Option<SeqId>, out: &mut Vec<StepResult>) {
        let mut failed = Vec::new();
        let mut rows = Vec::new();
        let mut who = Vec::new();
        for s in &self.seqs {
            let Some(last) = s.last else { continue };
            if Some(s.id) == skip {
                continue;
            }
            match self.runner.reserve(s.slot, s.pos + 1) {
                Ok(()) => {
                    rows.push(BatchRow {
                        token: last,
                        pos: s.pos as u32,
                        slot: s.slot,
                    });
                    who.push(s.id);
                }
                Err(e) => failed.push((s.id, e)),
            }
        }
        for (id, e) in failed {
            self.drop_seq(id);
            out.push((id, Err(e.into())));
        }
        if rows.is_empty() {
            return;
        }
        let res = match self.runner.step(&rows, false) {
            Ok(res) => res,
            Err(e) => {
                for id in who {
                    self.drop_seq(id);
                    out.push((id, Err(shared(&e))));
                }
                return;
            }
        };
        for (row, id) in who.into_iter().enumerate() {
            let Some(s) = self.seqs.iter_mut().find(|s| s.id == id) else {
                continue;
            };
            let r = Self::pick(&self.runner, s, &res[row], row, false);
            match &r {
                Ok(t) => {
                    s.last = Some(*t);
                    s.pos += 1;
                }
                Err(_) => self.drop_seq(id),
            }
            out.push((id, r));
        }
    }
}

impl Engine for BatchEngine<'_> {
    fn max_sequences(&self) -> usize {
        self.runner.slots().min(self.runner.max_rows())
    }

    fn context(&self) -> usize {
        self.runner.seq_context()
    }

    fn vocab(&self) -> usize {
        self.runner.model().config().vocab
    }

    fn kv_slots_total(&self) -> usize {
        self.runner.pool().capacity() * self.runner.pool().block()
    }

    fn kv_slots_in_use(&self) -> usize {
        self.runner.pool().in_use() * self.runner.pool().block()
    }

    fn kv_block(&self) -> usize {
        self.runner.pool().block()
    }

    fn add(&mut self, id: SeqId, prompt: Vec<u32>, sampling: Sampling) -> Result<()> {
        let sampler = check_request(&prompt, self.context(), self.vocab(), sampling)?;
        let slot = self
            .runner
            .open()
            .map_err(|e| ServeError::Unavailable(e.to_string()))?;
        self.seqs.push(Seq {
            id,
            slot,
            prompt,
            fed: 0,
            last: None,
            pos: 0,
            sampler,
        });
        Ok(())
    }

    fn step(&mut self) -> Vec<StepResult> {
        let mut out = Vec::new();
        let started = self.prefill_chunk(&mut out);
        self.decode(started, &mut out);
        out
    }

    fn free(&mut self, id: SeqId) {
        self.drop_seq(id);
    }

    fn running(&self) -> usize {
        self.seqs.len()
    }
}
