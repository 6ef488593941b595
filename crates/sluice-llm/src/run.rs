//! Generation through a [`Decoder`] (direct or replay mode); benchmarks are in
//! [`crate::bench`].

use std::time::Instant;

use serde::Serialize;

use crate::decode::Decoder;
use crate::error::LlmError;
use crate::sampler::Sampling;
use crate::tokenizer::{StreamDecoder, Tokenizer};

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StopReason {
    /// An end-of-generation token (EOS, EOT, `<|im_end|>`, ...) came.
    Eos,
    /// The text reached one of the stop strings.
    Stop,
    /// `max_tokens` were generated.
    Length,
    /// The KV cache is full.
    Context,
    /// `cancel` was set (Ctrl-C in a chat).
    Cancelled,
}

/// What to generate and when to stop.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Most new tokens.
    pub max_tokens: usize,
    /// Greedy or sampled.
    pub sampling: Sampling,
    /// Keep going through end-of-generation tokens.
    pub ignore_eos: bool,
    /// Stop before the first of these strings in the generated text (empty ones ignored).
    pub stop: Vec<String>,
    /// Position of the first prompt token: the KV cache before it is kept (0 = a fresh
    /// sequence; a chat continues at the length of the conversation so far).
    pub start: usize,
    /// Checked between prefill chunks and before every token: when set, generation ends
    /// (`Cancelled`; with no tokens when it came during the prompt, which is then only
    /// partly in the KV cache: a later turn must prefill it from `start` again).
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl GenerateOptions {
    /// Greedy, `max_tokens` at most, stopping at end-of-generation tokens.
    pub fn new(max_tokens: usize) -> GenerateOptions {
        GenerateOptions {
            max_tokens,
            sampling: Sampling::default(),
            ignore_eos: false,
            stop: Vec::new(),
            start: 0,
            cancel: None,
        }
    }
}

/// What a generation produced.
#[derive(Debug, Serialize)]
pub struct Generation {
    /// Prompt token ids.
    pub prompt_ids: Vec<u32>,
    /// Generated token ids (an end-of-generation token that stopped it is not included;
    /// after a stop string, the tokens up to the one that completed it are).
    pub tokens: Vec<u32>,
    /// Generated text (without the stop string; empty without a tokenizer).
    pub text: String,
    /// Why it ended: `eos`, `stop`, `length`, `context` or `cancelled`.
    pub stop_reason: StopReason,
    /// Decode speed in tokens per second (generated tokens after the first).
    pub tok_s: f64,
    /// Prompt processing speed in tokens per second.
    pub prefill_tok_s: f64,
}

/// Holds back generated text that could be the start of a stop string.
struct StopMatcher<'a> {
    stops: Vec<&'a str>,
    text: String,
    emitted: usize,
}

impl<'a> StopMatcher<'a> {
    fn new(stops: &'a [String]) -> Self {
        StopMatcher {
            stops: stops
                .iter()
                .map(String::as_str)
                .filter(|s| !s.is_empty())
                .collect(),
            text: String::new(),
            emitted: 0,
        }
    }

    /// Adds `new`; returns the text now safe to show and whether a stop string completed
    /// (then the text ends before it).
    fn push(&mut self, new: &str) -> (String, bool) {
        self.text.push_str(new);
        let tail = &self.text[self.emitted..];
        let hit = self.stops.iter().filter_map(|s| tail.find(s)).min();
        if let Some(at) = hit {
            let end = self.emitted + at;
            let out = self.text[self.emitted..end].to_string();
            self.text.truncate(end);
            self.emitted = end;
            return (out, true);
        }
        // The longest end of the text that begins some stop string stays back.
        let mut hold = 0;
        for s in &self.stops {
            for (k, _) in s.char_indices().skip(1) {
                if k > hold && tail.ends_with(&s[..k]) {
                    hold = k;
                }
            }
        }
        let end = self.text.len() - hold;
        let out = self.text[self.emitted..end].to_string();
        self.emitted = end;
        (out, false)
    }

    /// Whatever was held back.
    fn flush(&mut self) -> String {
        let out = self.text[self.emitted..].to_string();
        self.emitted = self.text.len();
        out
    }
}

/// Feeds `prompt` at `opts.start` and generates until an end-of-generation token (unless
/// `ignore_eos`), a stop string, `max_tokens` or a full KV cache. With a tokenizer the
/// text is decoded as it comes (whole UTF-8 characters only, control tokens skipped,
/// text that could begin a stop string held back until it is known not to);
/// `on_token(Some(id), text)` sees each new token and the text it completed (often
/// empty); `on_token(None, text)` the text released at the end.
/// Without a tokenizer the model config's EOS id still ends generation.
pub fn generate(
    decoder: &Decoder<'_>,
    tokenizer: Option<&Tokenizer>,
    prompt: &[u32],
    opts: &GenerateOptions,
    on_token: impl FnMut(Option<u32>, &str),
) -> Result<Generation, LlmError> {
    generate_with_progress(decoder, tokenizer, prompt, opts, &mut |_, _| {}, on_token)
}

/// [`generate`] calling `on_prompt(done, total)` as the prompt is processed: the prompt
/// tokens the GPU has finished, 0 first, then after each prefill chunk, `total` last
/// ([`Decoder::prefill_with_progress`]; with `opts.cancel`,
/// [`Decoder::prefill_cancellable`]).
pub fn generate_with_progress(
    decoder: &Decoder<'_>,
    tokenizer: Option<&Tokenizer>,
    prompt: &[u32],
    opts: &GenerateOptions,
    on_prompt: &mut dyn FnMut(usize, usize),
    mut on_token: impl FnMut(Option<u32>, &str),
) -> Result<Generation, LlmError> {
    let model = decoder.model();
    if prompt.is_empty() {
        return Err(LlmError::InvalidArgument(
            "empty prompt: give at least one token".into(),
        ));
    }
    if let Some(t) = tokenizer {
        if t.vocab_size() > model.config().vocab {
            return Err(LlmError::InvalidArgument(format!(
                "the tokenizer has {} tokens but the model only {}",
                t.vocab_size(),
                model.config().vocab
            )));
        }
    }
    if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= model.config().vocab) {
        return Err(LlmError::InvalidArgument(format!(
            "prompt token {bad} is outside the vocabulary of {} tokens",
            model.config().vocab
        )));
    }
    // Positions left after the prompt; every generated token can be fed back.
    let end = opts.start.checked_add(prompt.len());
    let room = match end {
        Some(e) if e < model.context() => model.context() - e,
        _ => {
            return Err(LlmError::InvalidArgument(format!(
                "prompt of {} tokens at position {} does not fit the context of {} tokens (raise --context)",
                prompt.len(),
                opts.start,
                model.context()
            )))
        }
    };
    let n = opts.max_tokens.min(room);
    let sampling = &opts.sampling;
    sampling.check()?;
    let mut sampler = crate::sampler::Sampler::new(*sampling)?;
    let eos_only: Vec<u32> = model.config().eos_token.into_iter().collect();
    let is_eog = |t: u32| match tokenizer {
        Some(tk) => tk.is_eog(t),
        None => eos_only.contains(&t),
    };
    let mut stream = tokenizer.map(|tk| StreamDecoder::continuation(tk, true));
    let mut stops = StopMatcher::new(&opts.stop);

    let t0 = Instant::now();
    // The token comes from the GPU (argmax or the sampling kernel) unless sampling was
    // asked for here but the model was loaded without it: then sample on the host.
    let host_sampling = !sampling.is_greedy() && !model.samples_on_gpu();
    let base = opts.start + prompt.len();
    let next = match &opts.cancel {
        Some(c) => decoder.prefill_cancellable(prompt, opts.start, on_prompt, c)?,
        None => Some(decoder.prefill_with_progress(prompt, opts.start, on_prompt)?),
    };
    let Some(mut next) = next else {
        // Cancelled between prefill chunks: nothing generated, the prompt only partly in
        // the cache.
        return Ok(Generation {
            prompt_ids: prompt.to_vec(),
            tokens: Vec::new(),
            text: String::new(),
            stop_reason: StopReason::Cancelled,
            tok_s: 0.0,
            prefill_tok_s: 0.0,
        });
    };
    if host_sampling {
        next = sampler.sample(&finite_logits(model.logits()?, base - 1)?)?;
    }
    let prefill = t0.elapsed().as_secs_f64();
    let mut tokens = Vec::with_capacity(n);
    let mut text = String::new();
    let mut reason = if opts.max_tokens > room {
        StopReason::Context
    } else {
        StopReason::Length
    };
    let t1 = Instant::now();
    for i in 0..n {
        if opts
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
        {
            reason = StopReason::Cancelled;
            break;
        }
        if !opts.ignore_eos && is_eog(next) {
            reason = StopReason::Eos;
            break;
        }
        tokens.push(next);
        let piece = match stream.as_mut() {
            Some(s) => s.push(next)?,
            None => String::new(),
        };
        let (shown, stopped) = stops.push(&piece);
        text.push_str(&shown);
        on_token(Some(next), &shown);
        if stopped {
            reason = StopReason::Stop;
            break;
        }
        if i + 1 == n {
            break;
        }
        next = decoder.step(next, base + i)?;
        if host_sampling {
            next = sampler.sample(&finite_logits(model.logits()?, base + i)?)?;
        }
    }
    if reason != StopReason::Stop {
        // Complete what is left: an unfinished character, text held for a stop string.
        let rest = stream.as_mut().map(|s| s.flush()).unwrap_or_default();
        let (mut shown, stopped) = stops.push(&rest);
        if stopped {
            reason = StopReason::Stop;
        } else {
            shown.push_str(&stops.flush());
        }
        if !shown.is_empty() {
            text.push_str(&shown);
            on_token(None, &shown);
        }
    }
    let decode = t1.elapsed().as_secs_f64();
    let generated = tokens.len();
    Ok(Generation {
        prompt_ids: prompt.to_vec(),
        tokens,
        text,
        stop_reason: reason,
        tok_s: if generated > 1 {
            (generated - 1) as f64 / decode
        } else {
            0.0
        },
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

#[cfg(test)]
mod tests {
    use super::StopMatcher;

    fn feed(stops: &[&str], pieces: &[&str]) -> (Vec<String>, bool, String) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut m = StopMatcher::new(&stops);
        let mut shown = Vec::new();
        for p in pieces {
            let (out, stopped) = m.push(p);
            shown.push(out);
            if stopped {
                return (shown, true, m.text.clone());
            }
        }
        shown.push(m.flush());
        (shown, false, m.text.clone())
    }

    #[test]
    fn stop_strings_split_over_tokens_are_caught_and_never_shown() {
        let (shown, stopped, text) = feed(&["</answer>"], &["42", "</ans", "wer>", "tail"]);
        assert!(stopped);
        assert_eq!(shown, vec!["42", "", ""]);
        assert_eq!(text, "42");
        // A false start is released once it cannot be a stop string any more.
        let (shown, stopped, text) = feed(&["</answer>"], &["a</an", "d more"]);
        assert!(!stopped);
        assert_eq!(shown, vec!["a", "</and more", ""]);
        assert_eq!(text, "a</and more");
        // The earliest of several stops wins; empty stops are ignored.
        let (shown, stopped, text) = feed(&["", "cd", "bc"], &["abcd"]);
        assert!(stopped);
        assert_eq!(shown, vec!["a"]);
        assert_eq!(text, "a");
        // Held text comes out at the end.
        let (shown, stopped, _) = feed(&["xyz"], &["abx", "y"]);
        assert!(!stopped);
        assert_eq!(shown.concat(), "abxy");
        assert_eq!(shown[0], "ab");
        // Multi-byte characters are never split.
        let (shown, stopped, text) = feed(&["éé"], &["aé", "b", "éé"]);
        assert!(stopped);
        assert_eq!(shown.concat(), "aéb");
        assert_eq!(text, "aéb");
    }
}
