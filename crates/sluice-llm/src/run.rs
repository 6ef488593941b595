//! Generation and benchmarking through a [`Decoder`] (direct or replay mode).

use std::time::Instant;

use serde::Serialize;
use sluice::Counters;

use crate::decode::Decoder;
use crate::error::LlmError;
use crate::sampler::Sampling;

/// What a generation produced.
#[derive(Debug, Serialize)]
pub struct Generation {
    /// Prompt token ids.
    pub prompt_ids: Vec<u32>,
    /// Generated token ids.
    pub tokens: Vec<u32>,
    /// Decode speed in tokens per second (generated tokens after the first).
    pub tok_s: f64,
    /// Prompt processing speed in tokens per second.
    pub prefill_tok_s: f64,
}

/// Feeds `prompt` then generates `n` tokens; `on_token` sees each new token as it comes.
pub fn generate(
    decoder: &Decoder<'_>,
    prompt: &[u32],
    n: usize,
    sampling: &Sampling,
    mut on_token: impl FnMut(u32),
) -> Result<Generation, LlmError> {
    let model = decoder.model();
    if prompt.is_empty() {
        return Err(LlmError::InvalidArgument(
            "empty prompt: give at least one token".into(),
        ));
    }
    // Checked: `-n 18446744073709551615` must not wrap past this test.
    if prompt
        .len()
        .checked_add(n)
        .is_none_or(|end| end > model.context())
    {
        return Err(LlmError::InvalidArgument(format!(
            "prompt of {} tokens + {n} new tokens does not fit the context of {} tokens (raise --context)",
            prompt.len(),
            model.context()
        )));
    }
    sampling.check()?;
    let mut sampler = crate::sampler::Sampler::new(*sampling)?;
    let t0 = Instant::now();
    // The token comes from the GPU (argmax or the sampling kernel) unless sampling was
    // asked for here but the model was loaded without it: then sample on the host.
    let host_sampling = !sampling.is_greedy() && !model.samples_on_gpu();
    let mut next = decoder.prefill(prompt, 0)?;
    if host_sampling {
        next = sampler.sample(&finite_logits(model.logits()?, prompt.len() - 1)?)?;
    }
    let prefill = t0.elapsed().as_secs_f64();
    let mut tokens = Vec::with_capacity(n);
    let t1 = Instant::now();
    for i in 0..n {
        tokens.push(next);
        on_token(next);
        if i + 1 == n {
            break;
        }
        next = decoder.step(next, prompt.len() + i)?;
        if host_sampling {
            next = sampler.sample(&finite_logits(model.logits()?, prompt.len() + i)?)?;
        }
    }
    let decode = t1.elapsed().as_secs_f64();
    Ok(Generation {
        prompt_ids: prompt.to_vec(),
        tokens,
        tok_s: if n > 1 { (n - 1) as f64 / decode } else { 0.0 },
        prefill_tok_s: prompt.len() as f64 / prefill,
    })
}

/// `logits` when all are finite; otherwise an error naming the position and the count.
pub fn finite_logits(logits: Vec<f32>, pos: usize) -> Result<Vec<f32>, LlmError> {
    let bad = logits.iter().filter(|v| !v.is_finite()).count();
    if bad > 0 {
        return Err(LlmError::InvalidArgument(format!(
            "decode step at position {pos}: {bad} of {} logits are NaN or infinite (broken weights or overflow)",
            logits.len()
        )));
    }
    Ok(logits)
}

/// Logits after feeding `prompt` from position 0 (overwrites the KV cache from 0).
pub fn prompt_logits(decoder: &Decoder<'_>, prompt: &[u32]) -> Result<Vec<f32>, LlmError> {
    decoder.prefill(prompt, 0)?;
    finite_logits(decoder.model().logits()?, prompt.len().saturating_sub(1))
}

/// A decode benchmark's figures (like llama-bench's `tg` row, plus runtime counters).
#[derive(Debug, Serialize)]
pub struct BenchReport {
    /// Device name.
    pub device: String,
    /// Model name.
    pub model: String,
    /// Weight dtype on the GPU.
    pub dtype: String,
    /// Direct or replay.
    pub mode: crate::decode::Mode,
    /// Tokens already in the KV cache before timing.
    pub depth: usize,
    /// Decoded tokens timed.
    pub n: usize,
    /// Prompt processing speed (tokens/s, batched prefill) while filling `depth` (or one token).
    pub prefill_tok_s: f64,
    /// Decode tokens per second.
    pub decode_tok_s: f64,
    /// Milliseconds per decoded token.
    pub ms_per_token: f64,
    /// Dispatches recorded per token.
    pub dispatches_per_token: f64,
    /// Barriers per token (dataflow barriers and the submit's trailing one).
    pub barriers_per_token: f64,
    /// Host waits per token.
    pub host_waits_per_token: f64,
    /// Submits per token.
    pub submits_per_token: f64,
    /// Weight bytes read per token.
    pub weight_bytes: u64,
    /// Weight bytes per token times tokens per second, in GB/s.
    pub weight_gb_s: f64,
    /// CPU µs per token spent recording and submitting.
    pub cpu_record_submit_us_per_token: f64,
    /// CPU µs spent once capturing, scheduling and recording the step (replay mode).
    pub replay_record_once_us: f64,
}

/// Fills the KV cache to `depth` (GPU-chained greedy steps), then times `n` greedy
/// decode steps queued back to back.
pub fn bench(
    decoder: &Decoder<'_>,
    name: &str,
    dtype: &str,
    depth: usize,
    n: usize,
) -> Result<BenchReport, LlmError> {
    let model = decoder.model();
    if n == 0 {
        return Err(LlmError::InvalidArgument(
            "bench needs at least one token (n = 0 gives no rate)".into(),
        ));
    }
    if depth.saturating_add(n).saturating_add(2) > model.context() {
        return Err(LlmError::ContextFull {
            context: model.context(),
        });
    }
    let device = model.device();
    // Fill the cache with a prompt of `depth` tokens through the batched prefill.
    let vocab = model.config().vocab as u32;
    let prompt: Vec<u32> = (0..depth.max(1) as u32)
        .map(|i| (i * 7919 + 1) % vocab)
        .collect();
    let t0 = Instant::now();
    let token = decoder.prefill(&prompt, 0)?;
    let prefill_tok_s = prompt.len() as f64 / t0.elapsed().as_secs_f64();
    let pos = prompt.len();
    // Warm-up step at this depth.
    decoder.run_greedy(token, pos, 1)?;
    model.set_params(token, pos)?;
    let before: Counters = device.counters();
    let t1 = Instant::now();
    let mut cpu = 0.0;
    for _ in 0..n {
        let c0 = Instant::now();
        decoder.submit_step()?;
        cpu += c0.elapsed().as_secs_f64();
    }
    let tokens = model.gpu_tokens(pos + 1, pos + 1 + n)?;
    let secs = t1.elapsed().as_secs_f64();
    debug_assert_eq!(tokens.len(), n);
    let d = device.counters().since(&before);
    let per = |v: u64| v as f64 / n as f64;
    let tok_s = n as f64 / secs;
    Ok(BenchReport {
        device: device.info().name.clone(),
        model: name.to_string(),
        dtype: dtype.to_string(),
        mode: decoder.mode(),
        depth,
        n,
        prefill_tok_s,
        decode_tok_s: tok_s,
        ms_per_token: secs * 1e3 / n as f64,
        dispatches_per_token: per(d.dispatches),
        barriers_per_token: per(d.barriers),
        host_waits_per_token: per(d.host_waits),
        submits_per_token: per(d.submits),
        weight_bytes: model.weight_bytes(),
        weight_gb_s: model.weight_bytes() as f64 * tok_s / 1e9,
        cpu_record_submit_us_per_token: cpu * 1e6 / n as f64,
        replay_record_once_us: decoder.record_us,
    })
}
