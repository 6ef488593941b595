//! A byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (the GPT-2 /
//! Qwen / Llama-3 family): vocabulary, merges and added (special) tokens.
//!
//! Pre-tokenization follows the Qwen2/Llama-3 split pattern (contractions, letter runs
//! with one leading non-letter, single digits, punctuation runs, whitespace runs) with a
//! hand-written scanner; Unicode categories come from `char::is_alphabetic` /
//! `is_numeric`, which can differ from the regex's `\p{L}`/`\p{N}` on rare characters.

use std::collections::HashMap;
use std::path::Path;

use crate::error::LlmError;

/// Encodes text to token ids and back.
pub struct Tokenizer {
    vocab: HashMap<String, u32>,
    id_to_token: Vec<String>,
    ranks: HashMap<(String, String), usize>,
    added: Vec<(String, u32)>,
    byte_to_char: [char; 256],
    char_to_byte: HashMap<char, u8>,
}

/// GPT-2's reversible map from bytes to printable characters.
fn byte_map() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..=255u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        out[b as usize] = if printable {
            char::from_u32(b).expect("valid")
        } else {
            n += 1;
            char::from_u32(255 + n).expect("valid")
        };
    }
    out
}

fn is_letter(c: char) -> bool {
    c.is_alphabetic()
}
fn is_number(c: char) -> bool {
    c.is_numeric()
}

/// Splits text into pre-tokens (Qwen2 / Llama-3 pattern).
fn pre_tokenize(text: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let end_of = |k: usize| chars.get(k).map(|c| c.0).unwrap_or(text.len());
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i].1;
        let start = i;
        // Contractions: 's 't 're 've 'm 'll 'd (case-insensitive).
        if c == '\'' {
            let rest: String = chars[i + 1..chars.len().min(i + 3)]
                .iter()
                .map(|c| c.1.to_ascii_lowercase())
                .collect();
            let n = if rest.starts_with("re") || rest.starts_with("ve") || rest.starts_with("ll") {
                3
            } else if rest.starts_with('s')
                || rest.starts_with('t')
                || rest.starts_with('m')
                || rest.starts_with('d')
            {
                2
            } else {
                0
            };
            if n > 0 {
                i += n;
                out.push(&text[chars[start].0..end_of(i)]);
                continue;
            }
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        let lead = !is_letter(c) && !is_number(c) && c != '\r' && c != '\n';
        let letters_from = if lead { i + 1 } else { i };
        if chars.get(letters_from).is_some_and(|c| is_letter(c.1)) {
            i = letters_from;
            while i < chars.len() && is_letter(chars[i].1) {
                i += 1;
            }
            out.push(&text[chars[start].0..end_of(i)]);
            continue;
        }
        // \p{N}
        if is_number(c) {
            i += 1;
            out.push(&text[chars[start].0..end_of(i)]);
            continue;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
        let punct = |c: char| !c.is_whitespace() && !is_letter(c) && !is_number(c);
        let p_from = if c == ' ' { i + 1 } else { i };
        if chars.get(p_from).is_some_and(|c| punct(c.1)) {
            i = p_from;
            while i < chars.len() && punct(chars[i].1) {
                i += 1;
            }
            while i < chars.len() && (chars[i].1 == '\r' || chars[i].1 == '\n') {
                i += 1;
            }
            out.push(&text[chars[start].0..end_of(i)]);
            continue;
        }
        // Whitespace: `\s*[\r\n]+`, `\s+(?!\S)`, `\s+`.
        let mut j = i;
        while j < chars.len() && chars[j].1.is_whitespace() {
            j += 1;
        }
        let last_newline = (i..j)
            .rev()
            .find(|&k| chars[k].1 == '\r' || chars[k].1 == '\n');
        i = match last_newline {
            Some(k) => k + 1,
            // Leave one space for the next word when a non-space follows.
            None if j < chars.len() && j - i > 1 => j - 1,
            None => j,
        };
        out.push(&text[chars[start].0..end_of(i)]);
    }
    out
}

impl Tokenizer {
    /// Reads `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Tokenizer, LlmError> {
        let bytes = crate::config::read_regular(path, 256 << 20)?;
        let text = String::from_utf8(bytes).map_err(|e| {
            LlmError::InvalidArgument(format!("{}: not UTF-8: {e}", path.display()))
        })?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| LlmError::Json {
            path: path.to_path_buf(),
            source: e,
        })?;
        let bad = |msg: &str| LlmError::Config {
            path: path.to_path_buf(),
            msg: msg.to_string(),
        };
        let model = &json["model"];
        if model["type"].as_str().is_some_and(|t| t != "BPE") {
            return Err(bad(&format!(
                "tokenizer model {} is not supported (BPE only)",
                model["type"]
            )));
        }
        let vocab_json = model["vocab"]
            .as_object()
            .ok_or_else(|| bad("model.vocab missing"))?;
        let mut vocab = HashMap::new();
        let mut max_id = 0;
        for (k, v) in vocab_json {
            let id = v
                .as_u64()
                .ok_or_else(|| bad("vocab ids must be integers"))? as u32;
            max_id = max_id.max(id);
            vocab.insert(k.clone(), id);
        }
        let mut added = Vec::new();
        for t in json["added_tokens"].as_array().into_iter().flatten() {
            if let (Some(content), Some(id)) = (t["content"].as_str(), t["id"].as_u64()) {
                added.push((content.to_string(), id as u32));
                max_id = max_id.max(id as u32);
            }
        }
        added.sort_by_key(|a| std::cmp::Reverse(a.0.len()));
        let mut id_to_token = vec![String::new(); max_id as usize + 1];
        for (k, &v) in &vocab {
            id_to_token[v as usize] = k.clone();
        }
        for (k, v) in &added {
            id_to_token[*v as usize] = k.clone();
        }
        let mut ranks = HashMap::new();
        for (r, m) in model["merges"].as_array().into_iter().flatten().enumerate() {
            let pair = match m {
                serde_json::Value::String(s) => s
                    .split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string())),
                serde_json::Value::Array(a) if a.len() == 2 => Some((
                    a[0].as_str().unwrap_or_default().to_string(),
                    a[1].as_str().unwrap_or_default().to_string(),
                )),
                _ => None,
            };
            if let Some(p) = pair {
                ranks.insert(p, r);
            }
        }
        let byte_to_char = byte_map();
        let char_to_byte = byte_to_char
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        Ok(Tokenizer {
            vocab,
            id_to_token,
            ranks,
            added,
            byte_to_char,
            char_to_byte,
        })
    }

    fn bpe(&self, word: &str, out: &mut Vec<u32>) {
        let mapped: String = word
            .bytes()
            .map(|b| self.byte_to_char[b as usize])
            .collect();
        let mut parts: Vec<String> = mapped.chars().map(|c| c.to_string()).collect();
        loop {
            let best = (0..parts.len().saturating_sub(1))
                .filter_map(|k| {
                    self.ranks
                        .get(&(parts[k].clone(), parts[k + 1].clone()))
                        .map(|&r| (r, k))
                })
                .min();
            let Some((_, k)) = best else { break };
            let merged = format!("{}{}", parts[k], parts[k + 1]);
            parts.splice(k..k + 2, [merged]);
        }
        for p in parts {
            if let Some(&id) = self.vocab.get(&p) {
                out.push(id);
            } else {
                // Unknown piece: fall back to its single characters.
                out.extend(
                    p.chars()
                        .filter_map(|c| self.vocab.get(&c.to_string()).copied()),
                );
            }
        }
    }

    /// Token ids of `text` (added tokens such as `<|im_start|>` are matched first).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            // The earliest added token in the rest.
            let hit = self
                .added
                .iter()
                .filter_map(|(s, id)| rest.find(s.as_str()).map(|p| (p, s.len(), *id)))
                .min_by_key(|h| h.0);
            let (plain, next) = match hit {
                Some((p, len, id)) => (&rest[..p], Some((id, p + len))),
                None => (rest, None),
            };
            for w in pre_tokenize(plain) {
                self.bpe(w, &mut out);
            }
            match next {
                Some((id, skip)) => {
                    out.push(id);
                    rest = &rest[skip..];
                }
                None => break,
            }
        }
        out
    }

    /// Text of `ids` (bytes that do not form UTF-8 are replaced).
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            let Some(tok) = self.id_to_token.get(id as usize) else {
                continue;
            };
            if self.added.iter().any(|(s, i)| *i == id && s == tok) {
                bytes.extend_from_slice(tok.as_bytes());
                continue;
            }
            for c in tok.chars() {
                match self.char_to_byte.get(&c) {
                    Some(&b) => bytes.push(b),
                    None => bytes.extend_from_slice(c.to_string().as_bytes()),
                }
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Vocabulary size (largest id + 1).
    pub fn len(&self) -> usize {
        self.id_to_token.len()
    }

    /// Whether the vocabulary is empty.
    pub fn is_empty(&self) -> bool {
        self.id_to_token.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_tokenizer_follows_the_qwen_pattern() {
        assert_eq!(pre_tokenize("Hello world"), vec!["Hello", " world"]);
        assert_eq!(
            pre_tokenize("it's 42!"),
            vec!["it", "'s", " ", "4", "2", "!"]
        );
        assert_eq!(pre_tokenize("a  b\n\nc"), vec!["a", " ", " b", "\n\n", "c"]);
    }

    fn fixture() -> Tokenizer {
        // Vocabulary: single bytes of "helo wrd" (mapped), plus merges building "hello" and " world".
        let bm = byte_map();
        let m = |s: &str| s.bytes().map(|b| bm[b as usize]).collect::<String>();
        let mut vocab = serde_json::Map::new();
        let pieces = [
            "h", "e", "l", "o", " ", "w", "r", "d", "he", "ll", "hell", "hello", " w", " wo",
            " wor", " worl", " world",
        ];
        for (i, p) in pieces.iter().enumerate() {
            vocab.insert(m(p), serde_json::json!(i));
        }
        let merges = [
            ("h", "e"),
            ("l", "l"),
            ("he", "ll"),
            ("hell", "o"),
            (" ", "w"),
            (" w", "o"),
            (" wo", "r"),
            (" wor", "l"),
            (" worl", "d"),
        ];
        let merges: Vec<String> = merges
            .iter()
            .map(|(a, b)| format!("{} {}", m(a), m(b)))
            .collect();
        let json = serde_json::json!({
            "model": {"type": "BPE", "vocab": vocab, "merges": merges},
            "added_tokens": [{"id": 100, "content": "<|end|>"}]
        });
        let dir = std::env::temp_dir().join(format!("sluice-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokenizer.json");
        std::fs::write(&path, json.to_string()).unwrap();
        Tokenizer::from_file(&path).unwrap()
    }

    #[test]
    fn bpe_round_trip_with_added_tokens() {
        let t = fixture();
        let ids = t.encode("hello world<|end|>hello");
        assert_eq!(ids, vec![11, 16, 100, 11]);
        assert_eq!(t.decode(&ids), "hello world<|end|>hello");
        // Unmerged text falls back to bytes.
        assert_eq!(t.encode("dew"), vec![7, 1, 5]);
    }
}
