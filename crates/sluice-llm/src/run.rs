//! Generation through a [`Decoder`] (direct or replay mode); benchmarks are in
//! [`crate::bench`].

use std::time::Instant;

use serde::Serialize;

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
