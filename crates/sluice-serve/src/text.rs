//! Text in and out: a small adapter over the model's tokenizer, the chat template and
//! incremental detokenization, so that the tokenizer rewrite (special-token parsing, chat
//! templates from the model, `StreamDecoder`, `is_eog`) swaps in here alone.

use std::collections::HashSet;
use std::sync::Arc;

use serde::Deserialize;
use sluice_llm::tokenizer::Tokenizer;

use crate::error::{Result, ServeError};

/// One chat message of a request.
#[derive(Clone, Debug, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The text: a string, or an array of `{"type": "text", "text": ...}` parts.
    #[serde(default)]
    pub content: Option<serde_json::Value>,
}

impl ChatMessage {
    /// The message text (text parts joined).
    pub fn text(&self) -> Result<String> {
        match &self.content {
            None | Some(serde_json::Value::Null) => Ok(String::new()),
            Some(serde_json::Value::String(s)) => Ok(s.clone()),
            Some(serde_json::Value::Array(parts)) => {
                let mut out = String::new();
                for p in parts {
                    match (p["type"].as_str(), p["text"].as_str()) {
                        (Some("text"), Some(t)) => out.push_str(t),
                        _ => {
                            return Err(ServeError::bad_request(
                                "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported",
                            ))
                        }
                    }
                }
                Ok(out)
            }
            Some(_) => Err(ServeError::bad_request(
                "message content must be a string or an array of text parts",
            )),
        }
    }
}

/// Encodes prompts, renders chats, decodes tokens and knows the end-of-generation tokens.
pub struct TextCodec {
    tokenizer: Option<Tokenizer>,
    eog: HashSet<u32>,
}

/// Special tokens that end a generation when the tokenizer has them.
const EOG_NAMES: &[&str] = &[
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "</s>",
];

impl TextCodec {
    /// An adapter over `tokenizer` (none: prompts must be token ids and output text is
    /// written as `<id>` per token); `eos` is the config's end-of-sequence token.
    pub fn new(tokenizer: Option<Tokenizer>, eos: Option<u32>) -> TextCodec {
        let mut eog: HashSet<u32> = eos.into_iter().collect();
        if let Some(t) = &tokenizer {
            for name in EOG_NAMES {
                let ids = t.encode(name);
                if ids.len() == 1 && t.decode(&ids) == *name {
                    eog.insert(ids[0]);
                }
            }
        }
        TextCodec { tokenizer, eog }
    }

    /// Whether text prompts and text output are available.
    pub fn has_tokenizer(&self) -> bool {
        self.tokenizer.is_some()
    }

    /// Whether `id` ends a generation.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// The end-of-generation tokens.
    pub fn eog_tokens(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.eog.iter().copied().collect();
        v.sort_unstable();
        v
    }

    /// Token ids of a prompt text (special tokens written in the text are matched).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match &self.tokenizer {
            Some(t) => Ok(t.encode(text)),
            None => Err(ServeError::bad_request(
                "this model has no tokenizer.json: send the prompt as an array of token ids",
            )),
        }
    }

    /// The chat rendered as the model's prompt (ChatML, ending with the assistant's turn).
    pub fn render_chat(&self, messages: &[ChatMessage]) -> Result<String> {
        if messages.is_empty() {
            return Err(ServeError::bad_request("`messages` must not be empty"));
        }
        let mut out = String::new();
        for m in messages {
            out.push_str("<|im_start|>");
            out.push_str(&m.role);
            out.push('\n');
            out.push_str(&m.text()?);
            out.push_str("<|im_end|>\n");
        }
        out.push_str("<|im_start|>assistant\n");
        Ok(out)
    }

    /// Text of `ids` (bytes that are not UTF-8 come out as U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> String {
        match &self.tokenizer {
            Some(t) => t.decode(ids),
            None => ids.iter().map(|i| format!("<{i}>")).collect(),
        }
    }

    /// An incremental decoder for one generation.
    pub fn stream(self: &Arc<Self>) -> StreamDecoder {
        StreamDecoder {
            codec: self.clone(),
            ids: Vec::new(),
            prefix: 0,
            read: 0,
        }
    }
}

/// Turns tokens into text pieces as they come, holding back bytes of an unfinished
/// UTF-8 character until the token that completes it.
pub struct StreamDecoder {
    codec: Arc<TextCodec>,
    ids: Vec<u32>,
    prefix: usize,
    read: usize,
}

impl StreamDecoder {
    /// Adds a token; returns the new text it completes (maybe empty).
    pub fn push(&mut self, id: u32) -> String {
        self.ids.push(id);
        let before = self.codec.decode(&self.ids[self.prefix..self.read]);
        let now = self.codec.decode(&self.ids[self.prefix..]);
        if now.ends_with('\u{FFFD}') {
            return String::new();
        }
        let piece = match now.strip_prefix(before.as_str()) {
            Some(p) => p.to_string(),
            None => now,
        };
        self.prefix = self.read;
        self.read = self.ids.len();
        piece
    }

    /// Text still held back (an unfinished character at the end), lossily.
    pub fn finish(&mut self) -> String {
        if self.read == self.ids.len() {
            return String::new();
        }
        let before = self.codec.decode(&self.ids[self.prefix..self.read]);
        let now = self.codec.decode(&self.ids[self.prefix..]);
        self.read = self.ids.len();
        self.prefix = self.read;
        now.strip_prefix(before.as_str())
            .map(str::to_string)
            .unwrap_or(now)
    }
}

/// Finds stop strings in the generated text and holds back text that may still become
/// one, so a stop string never reaches the client.
pub struct StopMatcher {
    stops: Vec<String>,
    text: String,
    sent: usize,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> StopMatcher {
        StopMatcher {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            text: String::new(),
            sent: 0,
        }
    }

    /// Adds generated text; returns the text safe to send and whether a stop string
    /// was found (the text then ends before it and generation must stop).
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        self.text.push_str(piece);
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let mut from = self.sent.saturating_sub(longest);
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        let hit = self
            .stops
            .iter()
            .filter_map(|s| self.text[from..].find(s.as_str()).map(|p| p + from))
            .min();
        if let Some(at) = hit {
            let out = self.text[self.sent.min(at)..at].to_string();
            self.sent = at;
            self.text.truncate(at);
            return (out, true);
        }
        // Hold back the longest tail that is a prefix of a stop string.
        let mut keep = self.text.len();
        for (i, _) in self.text[self.sent..]
            .char_indices()
            .map(|(i, c)| (i + self.sent, c))
        {
            let tail = &self.text[i..];
            if self.stops.iter().any(|s| s.starts_with(tail)) {
                keep = i;
                break;
            }
        }
        let out = self.text[self.sent..keep].to_string();
        self.sent = keep;
        (out, false)
    }

    /// The held-back text when generation ended without a stop string.
    pub fn flush(&mut self) -> String {
        let out = self.text[self.sent..].to_string();
        self.sent = self.text.len();
        out
    }

    /// All text accepted so far (without a stop string).
    pub fn text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            let (s, hit) = m.push(p);
            out.push_str(&s);
            if hit {
                return (out, true);
            }
        }
        out.push_str(&m.flush());
        (out, false)
    }

    #[test]
    fn stop_strings_across_pieces() {
        assert_eq!(
            run(&["END"], &["ab", "cE", "N", "Dxx"]),
            ("abc".into(), true)
        );
        assert_eq!(run(&["END"], &["abE", "Nx"]), ("abENx".into(), false));
        assert_eq!(run(&["xy", "b"], &["a", "ab"]), ("aa".into(), true));
        assert_eq!(run(&[], &["a", "é"]), ("aé".into(), false));
        assert_eq!(run(&["é!"], &["aé", "é!"]), ("aé".into(), true));
    }

    #[test]
    fn held_back_text_is_not_sent_early() {
        let mut m = StopMatcher::new(vec!["STOP".into()]);
        assert_eq!(m.push("hello ST"), ("hello ".into(), false));
        assert_eq!(m.push("O"), (String::new(), false));
        assert_eq!(m.push("RM"), ("STORM".into(), false));
    }

    #[test]
    fn no_tokenizer_writes_ids() {
        let c = Arc::new(TextCodec::new(None, Some(7)));
        assert!(c.is_eog(7) && !c.is_eog(8));
        let mut s = c.stream();
        assert_eq!(s.push(3), "<3>");
        assert_eq!(s.push(12), "<12>");
        assert!(c.encode("x").is_err());
    }
}
