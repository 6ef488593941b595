//! Text in and out: a small adapter over the model's tokenizer, the chat template and
//! incremental detokenization, so that the tokenizer rewrite (special-token parsing, chat
//! templates from the model, `StreamDecoder`, `is_eog`) swaps in here alone.

use std::collections::HashSet;

use serde::Deserialize;
use sluice_llm::chat::{ChatTemplate, Message};
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
    /// Leaked on purpose: streaming decoders borrow it for the life of the process (one
    /// tokenizer per server start).
    tokenizer: Option<&'static Tokenizer>,
    template: Option<ChatTemplate>,
    eog: HashSet<u32>,
}

/// The template used when the model ships none: ChatML.
pub const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

impl TextCodec {
    /// An adapter over `tokenizer` (none: prompts must be token ids and output text is
    /// written as `<id>` per token); `eos` is the model config's end-of-sequence token.
    /// The chat template is the tokenizer's, or ChatML when it has none.
    pub fn new(tokenizer: Option<Tokenizer>, eos: Option<u32>) -> Result<TextCodec> {
        let tokenizer: Option<&'static Tokenizer> = tokenizer.map(|t| &*Box::leak(Box::new(t)));
        let mut eog: HashSet<u32> = eos.into_iter().collect();
        let mut template = None;
        if let Some(t) = tokenizer {
            eog.extend(t.eog_ids().iter().copied());
            let src = t.chat_template().unwrap_or(CHATML);
            template = Some(ChatTemplate::new(
                src,
                t.bos_text().unwrap_or(""),
                t.eos_text().unwrap_or(""),
            )?);
        }
        Ok(TextCodec {
            tokenizer,
            template,
            eog,
        })
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

    fn tokenizer(&self) -> Result<&'static Tokenizer> {
        self.tokenizer.ok_or_else(|| {
            ServeError::bad_request(
                "this model has no tokenizer: send the prompt as an array of token ids",
            )
        })
    }

    /// Token ids of a completion prompt (BOS added when the model asks for it; special
    /// tokens written in the text are recognized).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.tokenizer()?.encode(text, true, true)?)
    }

    /// Token ids of a chat: the rendered template (which writes its own special tokens).
    pub fn encode_chat(&self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        let text = self.render_chat(messages)?;
        Ok(self.tokenizer()?.encode(&text, false, true)?)
    }

    /// The chat rendered as the model's prompt, ending with the assistant's turn.
    pub fn render_chat(&self, messages: &[ChatMessage]) -> Result<String> {
        if messages.is_empty() {
            return Err(ServeError::bad_request("`messages` must not be empty"));
        }
        let template = self.template.as_ref().ok_or_else(|| {
            ServeError::bad_request(
                "this model has no tokenizer: use /v1/completions with token ids",
            )
        })?;
        let msgs = messages
            .iter()
            .map(|m| Ok(Message::new(m.role.clone(), m.text()?)))
            .collect::<Result<Vec<Message>>>()?;
        template
            .render(&msgs, true)
            .map_err(|e| ServeError::bad_request(format!("chat template: {e}")))
    }

    /// Text of `ids` (control tokens skipped; bytes that are not UTF-8 come out as U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        match self.tokenizer {
            Some(t) => Ok(t.decode(ids, true)?),
            None => Ok(ids.iter().map(|i| format!("<{i}>")).collect()),
        }
    }

    /// An incremental decoder for one generation.
    pub fn stream(&self) -> StreamDecoder {
        StreamDecoder(self.tokenizer.map(|t| t.stream(true)))
    }
}

/// Turns generated tokens into text pieces as they come (an unfinished UTF-8 character
/// is held back until the token that completes it).
pub struct StreamDecoder(Option<sluice_llm::tokenizer::StreamDecoder<'static>>);

impl StreamDecoder {
    /// Adds a token; returns the new text it completes (maybe empty). Ids the tokenizer
    /// does not know (padding rows of the model's vocabulary) give no text.
    pub fn push(&mut self, id: u32) -> String {
        match &mut self.0 {
            Some(d) => d.push(id).unwrap_or_default(),
            None => format!("<{id}>"),
        }
    }

    /// Text still held back (an unfinished character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        match &mut self.0 {
            Some(d) => d.flush(),
            None => String::new(),
        }
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
        let c = TextCodec::new(None, Some(7)).unwrap();
        assert!(c.is_eog(7) && !c.is_eog(8));
        let mut s = c.stream();
        assert_eq!(s.push(3), "<3>");
        assert_eq!(s.push(12), "<12>");
        assert!(c.encode("x").is_err());
    }
}
