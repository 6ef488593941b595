//! Decode loop in two modes: `Direct` records every step anew; `Replay` captures the step
//! once, schedules it (reorder, barrier placement), records it into a command buffer and
//! resubmits it. In replay the chosen token and the position advance on the GPU, so
//! greedy decoding queues many steps without a host round trip.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use serde::Serialize;
use sluice::graph::{Graph, GraphOptions, Replay};

use crate::error::LlmError;
use crate::gpu::{GpuModel, Lowering};

/// How steps reach the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Mode {
    /// Record and submit each step.
    Direct,
    /// Record once, resubmit (default).
    Replay,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "direct" => Ok(Mode::Direct),
            "replay" => Ok(Mode::Replay),
            other => Err(format!("unknown mode {other:?}: use direct or replay")),
        }
    }
}

/// Shape of the recorded step.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct StepStats {
    /// Dispatches per step.
    pub dispatches: u64,
    /// Barriers per step (including the submit boundary).
    pub barriers: u64,
}

/// Prefill recordings a decoder keeps (one per chunk length).
const MAX_PREFILL_RECORDINGS: usize = 8;

/// Runs decode steps of a [`GpuModel`] in a [`Mode`].
pub struct Decoder<'m> {
    model: &'m GpuModel,
    mode: Mode,
    graph_options: GraphOptions,
    /// Replay mode: the step with the barrier lowering (when any position uses it).
    replay: Option<Replay>,
    /// Replay mode: the step with the persistent lowering (when any position uses it).
    replay_persistent: Option<Replay>,
    /// Position of the next step submitted (picks the lowering, see
    /// `GpuModel::persistent_at`); the GPU advances its own copy in the params buffer.
    next_pos: AtomicUsize,
    /// Replay mode: the prefill step recorded once per chunk length (a long prompt needs
    /// the full chunk and its tail; a chat turn one more).
    prefill_replays: std::sync::Mutex<std::collections::HashMap<usize, Replay>>,
    /// CPU µs spent capturing, scheduling and recording the replayed step (once).
    pub record_us: f64,
}

impl<'m> Decoder<'m> {
    /// Prepares decoding; in replay mode captures, schedules and records the step.
    pub fn new(
        model: &'m GpuModel,
        mode: Mode,
        graph: GraphOptions,
    ) -> Result<Decoder<'m>, LlmError> {
        let t = Instant::now();
        let record = |persistent: bool| -> Result<Replay, LlmError> {
            let mut cap = model.device().capture();
            model.encode_step_lowered(&mut cap, persistent)?;
            let mut g = cap.finish_capture()?;
            g.optimize(graph);
            Ok(g.record()?)
        };
        // Which lowerings some position uses: persistent from position 0 when any does
        // (Auto switches to barriers only later), barriers unless every step is persistent.
        let persistent = model.persistent_at(0);
        let barriers = !persistent || model.lowering() != Lowering::Persistent;
        let (replay, replay_persistent) = match mode {
            Mode::Direct => (None, None),
            Mode::Replay => (
                barriers.then(|| record(false)).transpose()?,
                persistent.then(|| record(true)).transpose()?,
            ),
        };
        Ok(Decoder {
            model,
            mode,
            graph_options: graph,
            replay,
            replay_persistent,
            next_pos: AtomicUsize::new(0),
            prefill_replays: Default::default(),
            record_us: t.elapsed().as_secs_f64() * 1e6,
        })
    }

    /// The captured step as a scheduled graph (for dumps and profiles).
    pub fn graph(model: &GpuModel, options: GraphOptions) -> Result<Graph, LlmError> {
        let mut cap = model.device().capture();
        model.encode_step(&mut cap)?;
        let mut graph = cap.finish_capture()?;
        graph.optimize(options);
        Ok(graph)
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The model.
    pub fn model(&self) -> &GpuModel {
        self.model
    }

    /// Writes the params for a step of `token` at `pos` (the next [`Decoder::submit_step`]
    /// runs it).
    pub fn set_params(&self, token: u32, pos: usize) -> Result<(), LlmError> {
        self.model.set_params(token, pos)?;
        self.next_pos.store(pos, Ordering::Relaxed);
        Ok(())
    }

    /// Submits one step for the token and position in the params buffer (set by
    /// [`Decoder::set_params`] or advanced by the previous step).
    pub fn submit_step(&self) -> Result<sluice::Ticket, LlmError> {
        let pos = self.next_pos.fetch_add(1, Ordering::Relaxed);
        let persistent = self.model.persistent_at(pos);
        let replay = if persistent {
            &self.replay_persistent
        } else {
            &self.replay
        };
        Ok(match replay {
            Some(r) => r.submit()?,
            None => {
                let mut enc = self.model.device().encoder()?;
                self.model.encode_step_lowered(&mut enc, persistent)?;
                enc.submit()?
            }
        })
    }

    /// Runs `token` at `pos` and returns the greedy next token (waits).
    pub fn step(&self, token: u32, pos: usize) -> Result<u32, LlmError> {
        self.set_params(token, pos)?;
        self.submit_step()?;
        self.model.next_token()
    }

    /// Feeds `prompt` at positions `pos..` in chunks of many tokens per dispatch and returns
    /// the greedy next token; the GPU's params then hold it at `pos + prompt.len()`.
    pub fn prefill(&self, prompt: &[u32], pos: usize) -> Result<u32, LlmError> {
        self.prefill_reporting(prompt, pos, None, None)?.token()
    }

    /// [`Decoder::prefill`] calling `progress(done, total)` with the prompt tokens the GPU
    /// has finished: 0 before the first chunk, then after each chunk but the last (the
    /// next chunk is queued before the wait, so the GPU does not idle for it) and once at
    /// the end (`done == total`).
    pub fn prefill_with_progress(
        &self,
        prompt: &[u32],
        pos: usize,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<u32, LlmError> {
        self.prefill_reporting(prompt, pos, Some(progress), None)?
            .token()
    }

    /// [`Decoder::prefill_with_progress`] that stops between chunks once `cancel` is set:
    /// `None` then, after the chunks already queued have finished (the GPU is idle; the KV
    /// cache holds the prompt's first chunks from `pos` only, so a later prefill must start
    /// at `pos` again).
    pub fn prefill_cancellable(
        &self,
        prompt: &[u32],
        pos: usize,
        progress: &mut dyn FnMut(usize, usize),
        cancel: &AtomicBool,
    ) -> Result<Option<u32>, LlmError> {
        match self.prefill_reporting(prompt, pos, Some(progress), Some(cancel))? {
            Prefilled::Token(t) => Ok(Some(t)),
            Prefilled::Cancelled => Ok(None),
        }
    }

    fn prefill_reporting(
        &self,
        prompt: &[u32],
        pos: usize,
        mut progress: Option<&mut dyn FnMut(usize, usize)>,
        cancel: Option<&AtomicBool>,
    ) -> Result<Prefilled, LlmError> {
        if prompt.is_empty() {
            return Err(LlmError::InvalidArgument(
                "empty prompt: give at least one token".into(),
            ));
        }
        let total = prompt.len();
        if let Some(report) = progress.as_deref_mut() {
            report(0, total);
        }
        let track = progress.is_some() || cancel.is_some();
        let mut at = pos;
        // The previous chunk's ticket and the tokens done when it completes.
        let mut pending: Option<(sluice::Ticket, usize)> = None;
        for (i, chunk) in prompt.chunks(self.model.prefill_chunk()).enumerate() {
            if i > 0 && cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                if let Some((last, _)) = pending {
                    last.wait()?;
                }
                self.next_pos.store(at, Ordering::Relaxed);
                return Ok(Prefilled::Cancelled);
            }
            self.model.set_prefill_params(chunk, at)?;
            let ticket = self.submit_prefill(chunk.len())?;
            at += chunk.len();
            if track {
                if let Some((done, tokens)) = pending.replace((ticket, at - pos)) {
                    done.wait()?;
                    if let Some(report) = progress.as_deref_mut() {
                        report(tokens, total);
                    }
                }
            }
        }
        self.next_pos.store(at, Ordering::Relaxed);
        let token = self.model.next_token()?;
        if let Some(report) = progress {
            report(total, total);
        }
        Ok(Prefilled::Token(token))
    }

    /// Submits the prefill of the `n` tokens in the params buffer: in replay mode the
    /// recording for `n` tokens (captured, scheduled and recorded on first use), else
    /// recorded now.
    fn submit_prefill(&self, n: usize) -> Result<sluice::Ticket, LlmError> {
        if self.mode == Mode::Direct {
            let mut enc = self.model.device().encoder()?;
            self.model.encode_prefill(&mut enc, n)?;
            return Ok(enc.submit()?);
        }
        // Lock poisoning: see docs/design.md (a panic elsewhere is propagated).
        let mut replays = self
            .prefill_replays
            .lock()
            .expect("prefill recordings poisoned");
        // Bounded: variable-length turns would otherwise keep one recording each.
        if !replays.contains_key(&n) && replays.len() >= MAX_PREFILL_RECORDINGS {
            replays.clear();
        }
        let replay = match replays.entry(n) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let mut cap = self.model.device().capture();
                self.model.encode_prefill(&mut cap, n)?;
                let mut graph = cap.finish_capture()?;
                graph.optimize(self.graph_options);
                e.insert(graph.record()?)
            }
        };
        Ok(replay.submit()?)
    }

    /// Greedy: feeds `token` at `pos` and lets the GPU continue for `n` steps in total,
    /// queueing all of them before reading the `n` chosen tokens back.
    pub fn run_greedy(&self, token: u32, pos: usize, n: usize) -> Result<Vec<u32>, LlmError> {
        if pos + n >= self.model.context() {
            return Err(LlmError::ContextFull {
                context: self.model.context(),
            });
        }
        self.set_params(token, pos)?;
        for _ in 0..n {
            self.submit_step()?;
        }
        self.model.gpu_tokens(pos + 1, pos + 1 + n)
    }
}

/// How a prefill ended.
enum Prefilled {
    /// The whole prompt is in the cache; the greedy next token.
    Token(u32),
    /// Stopped between chunks (`Decoder::prefill_cancellable`).
    Cancelled,
}

impl Prefilled {
    /// The token of a prefill that cannot be cancelled.
    fn token(self) -> Result<u32, LlmError> {
        match self {
            Prefilled::Token(t) => Ok(t),
            Prefilled::Cancelled => Err(LlmError::InvalidArgument(
                "prefill cancelled without a cancel flag".into(),
            )),
        }
    }
}
