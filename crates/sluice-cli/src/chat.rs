//! `sluice chat`: a multi-turn conversation through the model's chat template. The KV
//! cache is kept between turns: each turn's prompt is tokenized whole and only the tokens
//! after the part already in the cache are prefilled. `/reset` starts over, `/system TEXT`
//! sets the system prompt (and starts over), Ctrl-C stops the answer (not the program;
//! during a long prompt, between its prefill chunks, dropping the message),
//! Ctrl-D or `/quit` ends.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sluice::Device;
use sluice_llm::chat::{ChatTemplate, Message};
use sluice_llm::decode::Decoder;
use sluice_llm::load::open_model;
use sluice_llm::run::{generate_with_progress, GenerateOptions, StopReason};
use sluice_llm::sampler::Sampling;
use sluice_llm::tokenizer::Tokenizer;

use crate::llm::{model_args, prefill_progress, progress, ModelOpts};

/// `sluice chat` options.
#[derive(clap::Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    model: ModelOpts,
    /// System prompt
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
    /// Most tokens per answer
    #[arg(short = 'n', default_value_t = 512)]
    n: usize,
    /// Sampling temperature (0: greedy)
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Keep the K most likely tokens (0: all)
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Nucleus cut in (0, 1]
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Seed of the random draws
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// The conversation and what of it is in the KV cache.
struct Session {
    system: Option<String>,
    messages: Vec<Message>,
    /// Token ids whose keys and values are in the cache, from position 0.
    cached: Vec<u32>,
}

impl Session {
    fn reset(&mut self) {
        self.messages.clear();
        if let Some(s) = &self.system {
            self.messages.push(Message::new("system", s.clone()));
        }
        self.cached.clear();
    }
}

/// The prompt to prefill and where: the tokens of `full` after the longest prefix already
/// in the cache (at least one token is fed).
fn new_part(cached: &[u32], full: &[u32]) -> usize {
    let common = cached.iter().zip(full).take_while(|(a, b)| a == b).count();
    common.min(full.len().saturating_sub(1))
}

/// Runs `sluice chat`.
pub fn run(args: &ChatArgs, device: &Device) -> Result<(), String> {
    let sampling = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
    };
    sampling.check().map_err(|e| e.to_string())?;
    let mut m = model_args(&args.model, device, 4096)?;
    if !sampling.is_greedy() {
        m.load.gpu.sampling = Some(sampling);
    }
    let loaded =
        open_model(device, &m.model, &m.load, progress(false)).map_err(|e| e.to_string())?;
    let tok: &Tokenizer = loaded
        .tokenizer
        .as_ref()
        .ok_or_else(|| format!("{} has no tokenizer: chat needs tokenizer.json", m.model))?;
    let src = tok
        .chat_template()
        .ok_or_else(|| format!("{} has no chat template", m.model))?;
    let template = ChatTemplate::new(
        src,
        tok.bos_text().unwrap_or(""),
        tok.eos_text().unwrap_or(""),
    )
    .map_err(|e| e.to_string())?;
    let decoder = Decoder::new(&loaded.model, m.mode, m.graph).map_err(|e| e.to_string())?;
    let context = loaded.model.context();

    let cancel = Arc::new(AtomicBool::new(false));
    {
        let c = cancel.clone();
        // A second handler cannot be installed; the first one (this) is enough.
        ctrlc::set_handler(move || c.store(true, Ordering::Relaxed))
            .map_err(|e| format!("cannot catch Ctrl-C: {e}"))?;
    }
    eprintln!(
        "chat with {} ({} tokens of context). /reset, /system TEXT, /quit; Ctrl-C stops an answer, Ctrl-D ends.",
        m.model, context
    );
    let mut s = Session {
        system: args.system.clone(),
        messages: Vec::new(),
        cached: Vec::new(),
    };
    s.reset();
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        eprint!("> ");
        line.clear();
        let read = stdin
            .lock()
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        if read == 0 {
            eprintln!();
            return Ok(());
        }
        let input = line.trim_end_matches(['\n', '\r']);
        match input.trim() {
            "" => continue,
            "/quit" | "/exit" => return Ok(()),
            "/reset" => {
                s.reset();
                eprintln!("(conversation cleared)");
                continue;
            }
            t if t.starts_with("/system") => {
                let text = t["/system".len()..].trim();
                s.system = (!text.is_empty()).then(|| text.to_string());
                s.reset();
                eprintln!("(system prompt set; conversation cleared)");
                continue;
            }
            _ => {}
        }
        s.messages.push(Message::new("user", input));
        let text = template
            .render(&s.messages, true)
            .map_err(|e| e.to_string())?;
        // BOS when the model wants one and the template did not write it.
        let add_bos = tok.add_bos() && tok.bos_text().is_none_or(|b| !text.starts_with(b));
        let full = tok
            .encode(&text, add_bos, true)
            .map_err(|e| e.to_string())?;
        if full.len() >= context {
            s.messages.pop();
            eprintln!(
                "(the context is full: {} tokens with this message, {context} fit; /reset to start over)",
                full.len()
            );
            continue;
        }
        let start = new_part(&s.cached, &full);
        log::info!(
            "turn: {} prompt tokens, {} in the cache, prefilling {} at position {start}",
            full.len(),
            s.cached.len(),
            full.len() - start
        );
        let opts = GenerateOptions {
            max_tokens: args.n,
            sampling,
            ignore_eos: false,
            stop: Vec::new(),
            start,
            cancel: Some(cancel.clone()),
        };
        cancel.store(false, Ordering::Relaxed);
        let mut write_error = None;
        // A new part longer than one prefill chunk shows its progress (on a terminal).
        let quiet = full.len() - start <= loaded.model.prefill_chunk();
        let mut on_prompt = prefill_progress(quiet, "prompt", false);
        let r = generate_with_progress(
            &decoder,
            Some(tok),
            &full[start..],
            &opts,
            &mut on_prompt,
            |_, piece| {
                if write_error.is_none() {
                    if let Err(e) = crate::out!("{piece}").and_then(|()| crate::out::flush()) {
                        write_error = Some(e);
                    }
                }
            },
        )
        .map_err(|e| e.to_string())?;
        crate::outln!()?;
        if let Some(e) = write_error {
            return Err(e);
        }
        if r.stop_reason == StopReason::Cancelled && r.tokens.is_empty() {
            // Stopped during the prompt (or before the first token): the cache holds the
            // conversation before this message for sure, the message is dropped.
            s.cached = full[..start].to_vec();
            s.messages.pop();
            eprintln!("(stopped before the answer began: the message was dropped)");
            continue;
        }
        // What the cache holds now: the prompt and every generated token that was fed
        // back (all but the last, unless an end-of-generation token came after it).
        let fed = match r.stop_reason {
            StopReason::Eos => r.tokens.len(),
            _ => r.tokens.len().saturating_sub(1),
        };
        s.cached = full;
        s.cached.extend_from_slice(&r.tokens[..fed]);
        s.messages.push(Message::new("assistant", r.text));
        match r.stop_reason {
            StopReason::Cancelled => eprintln!("(stopped)"),
            StopReason::Context => {
                eprintln!("(the context of {context} tokens is full: /reset to start over)")
            }
            StopReason::Length => eprintln!("(answer cut at {} tokens)", args.n),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::new_part;

    #[test]
    fn only_the_new_tokens_are_prefilled() {
        assert_eq!(new_part(&[], &[1, 2, 3]), 0);
        assert_eq!(new_part(&[1, 2], &[1, 2, 3, 4]), 2);
        // The template rewrote history: restart where it diverges.
        assert_eq!(new_part(&[1, 9, 9, 9], &[1, 2, 3]), 1);
        // Never an empty prompt.
        assert_eq!(new_part(&[1, 2, 3], &[1, 2, 3]), 2);
    }
}
