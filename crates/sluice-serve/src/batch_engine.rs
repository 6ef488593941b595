//! [`BatchEngine`]: the [`Engine`] over the paged KV cache — every running sequence
//! advances in one batched step per token (continuous batching), and a new sequence's
//! prompt runs in pieces interleaved with those steps.
//!
//! One [`Engine::step`] is, with [`PromptSteps::Mixed`] (the default), ONE batched step
//! whose rows are every running sequence's next token followed by prompt tokens of the
//! sequences still in their prompt (oldest first): `tokens` of them, more where the step's
//! last pass over the weights has rows to spare (the runner's [`BatchRunner::row_group`]),
//! within the runner's row limit. The weights are read once for both, and the step's cost
//! stays near a decode step's. With [`PromptSteps::Chunks`] it is a prompt chunk of the
//! oldest sequence still in its prompt (a step of its own), then the batched decode step
//! over every other sequence. Either way a sequence's first token comes from the step
//! that ran its last prompt token, and its greedy tokens do not depend on the others in
//! the batch: every row of one engine goes through the same kernels, which reduce in a
//! fixed order per row, whatever the rows around it.

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

/// Prompt tokens a mixed step carries by default ([`PromptSteps::Mixed`]).
pub const DEFAULT_STEP_PROMPT_TOKENS: usize = 32;

/// How a [`BatchEngine`] runs the prompts of new sequences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptSteps {
    /// Prompt tokens join the batched decode step: `tokens` per step, rounded up to fill
    /// the step's last row group, within the runner's row limit.
    Mixed {
        /// Prompt tokens per step (at least 1 is taken).
        tokens: usize,
    },
    /// A step of its own per prompt chunk (up to [`BatchRunner::max_prefill_rows`] tokens,
    /// the last row's logits only) before each decode step.
    Chunks,
}

impl Default for PromptSteps {
    fn default() -> PromptSteps {
        PromptSteps::Mixed {
            tokens: DEFAULT_STEP_PROMPT_TOKENS,
        }
    }
}

/// Prompt rows a mixed step of `decode` decode rows takes: `tokens` (at least 1), then up
/// to the end of the row group (`group` rows per pass) the step reaches, within `max`.
pub fn mixed_prompt_rows(decode: usize, tokens: usize, group: usize, max: usize) -> usize {
    let end = (decode + tokens.max(1)).next_multiple_of(group.max(1));
    end.min(max).saturating_sub(decode)
}

/// The continuous-batching engine over a [`BatchRunner`].
pub struct BatchEngine<'m> {
    runner: BatchRunner<'m>,
    /// Running sequences in admission order.
    seqs: Vec<Seq>,
    prompts: PromptSteps,
    /// Prompt tokens per chunk step ([`PromptSteps::Chunks`]).
    chunk: usize,
    /// The runner's rows per pass over the weights ([`BatchRunner::row_group`]).
    group: usize,
}

/// A failure of a step shared by several sequences, as an error each can own.
fn shared(e: &LlmError) -> ServeError {
    ServeError::Model(e.to_string())
}

impl<'m> BatchEngine<'m> {
    /// An engine over `runner` (a model loaded with a paged KV cache; argmax on the GPU,
    /// non-greedy requests sampled on the host) running prompts as `prompts` says.
    pub fn new(mut runner: BatchRunner<'m>, prompts: PromptSteps) -> BatchEngine<'m> {
        runner.set_prompt_rows(prompts != PromptSteps::Chunks);
        BatchEngine {
            chunk: runner.max_prefill_rows().max(1),
            group: runner.row_group(),
            runner,
            seqs: Vec::new(),
            prompts,
        }
    }

    /// Records ahead every batched step this engine can take (each row bucket at each
    /// attention depth: decode steps, with [`PromptSteps::Mixed`] also in their form with
    /// prompt rows, and prompt chunks with [`PromptSteps::Chunks`]), so
    /// that no request waits for a recording, the first for the pipelines too
    /// ([`BatchRunner::record_ahead`]). Returns the recordings made.
    pub fn record_ahead(&mut self) -> Result<usize, LlmError> {
        let mut n = self.runner.record_ahead(false, |_, _| {})?;
        if self.prompts == PromptSteps::Chunks {
            n += self.runner.record_ahead(true, |_, _| {})?;
        }
        Ok(n)
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

    /// One batched step: every sequence past its prompt (but `skip`) advances by a token,
    /// and with `prompt_tokens`, prompt tokens of the others (oldest first) take
    /// [`mixed_prompt_rows`] rows.
    fn batched(
        &mut self,
        prompt_tokens: Option<usize>,
        skip: Option<SeqId>,
        out: &mut Vec<StepResult>,
    ) {
        let mut rows = Vec::new();
        // (sequence, row of its result, prompt tokens fed after this step); row `None`:
        // a prompt row whose logits nobody reads.
        let mut who: Vec<(SeqId, Option<usize>, usize)> = Vec::new();
        let mut failed = Vec::new();
        for s in &self.seqs {
            let Some(last) = s.last.filter(|_| Some(s.id) != skip) else {
                continue;
            };
            match self.runner.reserve(s.slot, s.pos + 1) {
                Ok(()) => {
                    who.push((s.id, Some(rows.len()), s.fed));
                    rows.push(BatchRow {
                        token: last,
                        pos: s.pos as u32,
                        slot: s.slot,
                    });
                }
                Err(e) => failed.push((s.id, e)),
            }
        }
        let end = prompt_tokens.map_or(0, |t| {
            rows.len() + mixed_prompt_rows(rows.len(), t, self.group, self.runner.max_rows())
        });
        for s in &self.seqs {
            let room = end.saturating_sub(rows.len());
            if s.last.is_some() || room == 0 {
                continue;
            }
            let upto = (s.fed + room).min(s.prompt.len());
            if let Err(e) = self.runner.reserve(s.slot, upto) {
                failed.push((s.id, e));
                continue;
            }
            rows.extend((s.fed..upto).map(|p| BatchRow {
                token: s.prompt[p],
                pos: p as u32,
                slot: s.slot,
            }));
            let last_row = (upto == s.prompt.len()).then(|| rows.len() - 1);
            who.push((s.id, last_row, upto));
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
                for (id, _, _) in who {
                    self.drop_seq(id);
                    out.push((id, Err(shared(&e))));
                }
                return;
            }
        };
        for (id, row, fed) in who {
            let Some(s) = self.seqs.iter_mut().find(|s| s.id == id) else {
                continue;
            };
            let in_prompt = s.last.is_none();
            s.fed = fed;
            let Some(row) = row else { continue };
            if in_prompt {
                s.pos = fed;
            }
            let r = Self::pick(&self.runner, s, &res[row], row, false);
            match &r {
                Ok(t) => {
                    s.pos += usize::from(!in_prompt);
                    s.last = Some(*t);
                }
                Err(_) => self.drop_seq(id),
            }
            out.push((id, r));
        }
    }

    fn drop_seq(&mut self, id: SeqId) {
        if let Some(i) = self.seqs.iter().position(|s| s.id == id) {
            let s = self.seqs.remove(i);
            self.runner.close(s.slot);
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
        match self.prompts {
            PromptSteps::Mixed { tokens } => self.batched(Some(tokens), None, &mut out),
            PromptSteps::Chunks => {
                let started = self.prefill_chunk(&mut out);
                self.batched(None, started, &mut out);
            }
        }
        out
    }

    fn free(&mut self, id: SeqId) {
        self.drop_seq(id);
    }

    fn running(&self) -> usize {
        self.seqs.len()
    }

    fn recorded_steps(&self) -> usize {
        self.runner.recordings()
    }
}
