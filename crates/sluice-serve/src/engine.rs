//! The [`Engine`] trait the scheduler drives, and [`GpuEngine`], the real engine over
//! today's single-sequence [`GpuModel`].
//!
//! An engine holds running sequences and advances all of them by one token per
//! [`Engine::step`]. The scheduler adds sequences only between steps (token boundaries),
//! so an engine that can batch (continuous batching) plugs in without scheduler changes:
//! it reports a larger [`Engine::max_sequences`] and decodes them together in `step`.

use sluice_llm::decode::Decoder;
use sluice_llm::gpu::GpuModel;
use sluice_llm::sampler::{Sampler, Sampling};

use crate::error::{Result, ServeError};

/// Identifies a sequence inside an engine (unique for the server's life).
pub type SeqId = u64;

/// What one step produced for one sequence: its next token, or why it failed (the
/// sequence is then dropped; the others go on).
pub type StepResult = (SeqId, Result<u32>);

/// A model that decodes a set of running sequences one token at a time.
pub trait Engine {
    /// How many sequences can run at once (the batch size).
    fn max_sequences(&self) -> usize;
    /// Positions per sequence (prompt + generated) the KV cache holds.
    fn context(&self) -> usize;
    /// Token ids the model knows (`0..vocab`).
    fn vocab(&self) -> usize;
    /// KV-cache token slots in all (`context` × sequences the cache can hold).
    fn kv_slots_total(&self) -> usize;
    /// KV-cache token slots the running sequences hold now.
    fn kv_slots_in_use(&self) -> usize;
    /// Token slots per KV-cache block (1 when the cache is not paged).
    fn kv_block(&self) -> usize {
        1
    }
    /// Starts a sequence for `prompt`; its first token comes with the next [`Engine::step`].
    /// Errors (no free slot, prompt too long) leave the engine unchanged.
    fn add(&mut self, id: SeqId, prompt: Vec<u32>, sampling: Sampling) -> Result<()>;
    /// Advances every running sequence by one token (a new sequence runs its prompt first).
    fn step(&mut self) -> Vec<StepResult>;
    /// Ends sequence `id` and frees its KV slots (no-op for an unknown id).
    fn free(&mut self, id: SeqId);
    /// Running sequences.
    fn running(&self) -> usize;
    /// Steps recorded for replay so far (the batched engine: one per row bucket and
    /// attention depth); 0 for an engine that does not report them.
    fn recorded_steps(&self) -> usize {
        0
    }
}

/// Checks a new sequence's prompt against the context and vocabulary and its sampling
/// settings; the host sampler it needs (`None` when greedy: the GPU's argmax).
pub fn check_request(
    prompt: &[u32],
    context: usize,
    vocab: usize,
    sampling: Sampling,
) -> Result<Option<Sampler>> {
    if prompt.is_empty() || prompt.len() >= context {
        return Err(ServeError::bad_request(format!(
            "prompt of {} tokens does not fit: give 1 to {} tokens (context {context})",
            prompt.len(),
            context.saturating_sub(1)
        )));
    }
    if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= vocab) {
        return Err(ServeError::bad_request(format!(
            "token id {bad} is outside the vocabulary of {vocab} tokens"
        )));
    }
    sampling.check()?;
    Ok(if sampling.is_greedy() {
        None
    } else {
        Some(Sampler::new(sampling)?)
    })
}

struct Seq {
    id: SeqId,
    prompt: Vec<u32>,
    /// The last token produced (input of the next step); `None` before the prompt ran.
    last: Option<u32>,
    /// Position of `last` (tokens in the KV cache).
    pos: usize,
    /// Host sampler when the request is not greedy.
    sampler: Option<Sampler>,
}

/// The engine over one [`GpuModel`] with ONE KV cache: batch size 1. One sequence runs
/// from prompt to end while the others wait in the scheduler's queue.
pub struct GpuEngine<'m> {
    decoder: Decoder<'m>,
    seq: Option<Seq>,
}

impl<'m> GpuEngine<'m> {
    /// An engine decoding through `decoder` (the model must take the argmax on the GPU:
    /// loaded without GPU sampling; non-greedy requests are sampled on the host).
    pub fn new(decoder: Decoder<'m>) -> GpuEngine<'m> {
        GpuEngine { decoder, seq: None }
    }

    fn model(&self) -> &GpuModel {
        self.decoder.model()
    }

    fn advance(&self, s: &mut Seq) -> Result<u32> {
        let model = self.model();
        let greedy_on_gpu = match s.last {
            None => {
                let t = self.decoder.prefill(&s.prompt, 0)?;
                s.pos = s.prompt.len();
                t
            }
            Some(last) => {
                if s.pos >= model.context() {
                    return Err(sluice_llm::LlmError::ContextFull {
                        context: model.context(),
                    }
                    .into());
                }
                let t = self.decoder.step(last, s.pos)?;
                s.pos += 1;
                t
            }
        };
        let token = match &mut s.sampler {
            Some(sampler) => sampler.sample(&model.logits()?)?,
            None => greedy_on_gpu,
        };
        s.last = Some(token);
        Ok(token)
    }
}

impl Engine for GpuEngine<'_> {
    fn max_sequences(&self) -> usize {
        1
    }

    fn context(&self) -> usize {
        self.model().context()
    }

    fn vocab(&self) -> usize {
        self.model().config().vocab
    }

    fn kv_slots_total(&self) -> usize {
        self.model().context()
    }

    fn kv_slots_in_use(&self) -> usize {
        self.seq.as_ref().map_or(0, |s| s.pos)
    }

    fn add(&mut self, id: SeqId, prompt: Vec<u32>, sampling: Sampling) -> Result<()> {
        if self.seq.is_some() {
            return Err(ServeError::Unavailable(
                "the engine runs one sequence at a time and it is busy".into(),
            ));
        }
        let sampler = check_request(&prompt, self.context(), self.vocab(), sampling)?;
        self.seq = Some(Seq {
            id,
            prompt,
            last: None,
            pos: 0,
            sampler,
        });
        Ok(())
    }

    fn step(&mut self) -> Vec<StepResult> {
        let Some(mut s) = self.seq.take() else {
            return Vec::new();
        };
        let r = self.advance(&mut s);
        let id = s.id;
        if r.is_ok() {
            self.seq = Some(s);
        }
        vec![(id, r)]
    }

    fn free(&mut self, id: SeqId) {
        if self.seq.as_ref().is_some_and(|s| s.id == id) {
            self.seq = None;
        }
    }

    fn running(&self) -> usize {
        usize::from(self.seq.is_some())
    }
}
