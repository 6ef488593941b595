//! Tokenizers that give the token ids llama.cpp and Hugging Face give.
//!
//! Two sources:
//! - a Hugging Face `tokenizer.json` (with `tokenizer_config.json`,
//!   `generation_config.json` and `config.json` beside it when present), run by the
//!   `tokenizers` crate: its normalizer, pre-tokenizer, model and added tokens as written;
//! - a GGUF vocabulary (`tokenizer.ggml.*`): byte-level BPE (`gpt2`) with the
//!   pre-tokenizer regexes llama.cpp uses for `tokenizer.ggml.pre`, or SentencePiece
//!   (`llama`) with byte fallback; this follows llama.cpp's `llama-vocab.cpp` step by
//!   step (special-token partition, regex split, rank-ordered merges, score-ordered
//!   SentencePiece merges, detokenization).
//!
//! Both give the same [`Tokenizer`]: `encode` / `decode`, the special ids, the
//! end-of-generation set, the chat template, and a [`StreamDecoder`] that turns ids into
//! text one complete UTF-8 character at a time.

mod hf;
mod llama;
mod stream;

pub use llama::GgufVocab;
pub use stream::StreamDecoder;

use crate::error::{LlmError, Result};

/// Most tokens a vocabulary may have (checked before anything is allocated per token).
pub const MAX_VOCAB: usize = 1 << 21;
/// Most BPE merges a vocabulary may have.
pub const MAX_MERGES: usize = 1 << 22;
/// Longest token text in bytes.
pub const MAX_TOKEN_BYTES: usize = 1 << 16;

/// What a token is (GGUF `tokenizer.ggml.token_type`; Hugging Face added tokens map to
/// `Control` when `special`, else `UserDefined`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum TokenKind {
    /// Type 0: no type; renders as nothing.
    Undefined,
    /// Type 1: an ordinary piece of text.
    Normal,
    /// Type 2: the unknown token.
    Unknown,
    /// Type 3: a control token (`<|im_start|>`, `<s>`); matched in text only when
    /// special tokens are parsed, dropped by `decode(.., skip_special = true)`.
    Control,
    /// Type 4: a user-defined token, always matched in text and always rendered.
    UserDefined,
    /// Type 5: reserved, never produced by encoding text.
    Unused,
    /// Type 6: one byte (`<0x0A>`), SentencePiece byte fallback.
    Byte,
}

impl TokenKind {
    /// The kind of a GGUF token type number (unknown numbers are `Undefined`, as in llama.cpp).
    pub fn from_gguf(t: i32) -> TokenKind {
        match t {
            1 => TokenKind::Normal,
            2 => TokenKind::Unknown,
            3 => TokenKind::Control,
            4 => TokenKind::UserDefined,
            5 => TokenKind::Unused,
            6 => TokenKind::Byte,
            _ => TokenKind::Undefined,
        }
    }

    /// Whether the token is dropped when decoding with `skip_special`.
    pub fn is_special(self) -> bool {
        matches!(self, TokenKind::Control | TokenKind::Unknown)
    }
}

/// Token texts that end generation whatever the file says (llama.cpp's list).
pub(crate) const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
];

/// How a normal token's text maps to the bytes it stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PieceStyle {
    /// GPT-2 byte-level: every character stands for one byte.
    ByteLevel,
    /// SentencePiece: `▁` is a space, `<0xXX>` byte tokens are bytes.
    Metaspace,
    /// The text is the text.
    Raw,
}

/// How decoded text is tidied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CleanSpaces {
    /// Left as is.
    Off,
    /// llama.cpp's three passes (` .` `,` `?` `!`, ` ' `, contractions).
    Llama,
    /// transformers' `clean_up_tokenization`.
    Hf,
}

enum Backend {
    Hf(Box<hf::HfBackend>),
    Llama(Box<llama::LlamaBackend>),
}

/// A tokenizer read from `tokenizer.json` or a GGUF vocabulary.
pub struct Tokenizer {
    texts: Vec<String>,
    kinds: Vec<TokenKind>,
    pieces: Vec<Box<[u8]>>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    eog: Vec<u32>,
    add_space_prefix: bool,
    clean_spaces: CleanSpaces,
    chat_template: Option<String>,
    backend: Backend,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind_name())
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("add_bos", &self.add_bos)
            .field("eog", &self.eog)
            .finish()
    }
}

/// GPT-2's reversible map from bytes to printable characters.
pub(crate) fn byte_to_char_table() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..=255u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let c = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
        // Every value is below 0x200: always a valid char.
        out[b as usize] = char::from_u32(c).unwrap_or('\u{FFFD}');
    }
    out
}

/// The byte a GPT-2 byte-level character stands for.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let c = c as u32;
    let printable = (33..=126).contains(&c) || (161..=172).contains(&c) || (174..=255).contains(&c);
    if printable {
        return Some(c as u8);
    }
    if !(256..256 + 68).contains(&c) {
        return None;
    }
    // The (c - 255)-th non-printable byte.
    let mut n = 0u32;
    for b in 0..=255u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        if !printable {
            n += 1;
            if 255 + n == c {
                return Some(b as u8);
            }
        }
    }
    None
}

/// `<0xXX>` -> the byte.
pub(crate) fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// The bytes a token renders as (special tokens included: callers filter).
pub(crate) fn render_piece(text: &str, kind: TokenKind, style: PieceStyle) -> Vec<u8> {
    match kind {
        TokenKind::Control | TokenKind::Unknown | TokenKind::UserDefined => {
            text.as_bytes().to_vec()
        }
        TokenKind::Byte => match parse_byte_token(text) {
            Some(b) => vec![b],
            None => text.as_bytes().to_vec(),
        },
        TokenKind::Undefined | TokenKind::Unused => Vec::new(),
        TokenKind::Normal => match style {
            PieceStyle::Raw => text.as_bytes().to_vec(),
            PieceStyle::Metaspace => text.replace('\u{2581}', " ").into_bytes(),
            PieceStyle::ByteLevel => {
                let mut out = Vec::with_capacity(text.len());
                for c in text.chars() {
                    match char_to_byte(c) {
                        Some(b) => out.push(b),
                        // Not a byte-level character: llama.cpp writes a marker; keep the text.
                        None => out.extend_from_slice(c.to_string().as_bytes()),
                    }
                }
                out
            }
        },
    }
}

/// Everything both sources fill in before the tokenizer is assembled.
pub(crate) struct Parts {
    pub texts: Vec<String>,
    pub kinds: Vec<TokenKind>,
    pub style: PieceStyle,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    /// Extra end-of-generation ids (eot, eom, generation_config's list).
    pub eog_extra: Vec<u32>,
    pub add_space_prefix: bool,
    pub clean_spaces: CleanSpaces,
    pub chat_template: Option<String>,
}

impl Tokenizer {
    fn assemble(mut p: Parts, backend: Backend, what: &str) -> Result<Tokenizer> {
        let n = p.texts.len();
        if p.kinds.len() != n {
            return Err(LlmError::tokenizer(
                what,
                format!("{} token kinds for {n} tokens", p.kinds.len()),
            ));
        }
        let in_range = |id: Option<u32>| id.filter(|&i| (i as usize) < n);
        p.bos = in_range(p.bos);
        p.eos = in_range(p.eos);
        if p.add_bos && p.bos.is_none() {
            return Err(LlmError::tokenizer(
                what,
                "add_bos_token is true but there is no BOS token",
            ));
        }
        if p.add_eos && p.eos.is_none() {
            return Err(LlmError::tokenizer(
                what,
                "add_eos_token is true but there is no EOS token",
            ));
        }
        // End of generation: the text list, eos and the extras; all become control tokens.
        let mut eog: Vec<u32> = p
            .eog_extra
            .iter()
            .copied()
            .filter(|&i| (i as usize) < n)
            .collect();
        eog.extend(p.eos);
        for (id, t) in p.texts.iter().enumerate() {
            if EOG_TEXTS.contains(&t.as_str()) {
                eog.push(id as u32);
            }
        }
        eog.sort_unstable();
        eog.dedup();
        // gpt-oss: `<|return|>` and `<|call|>` end a turn, `<|end|>` only a message.
        let has = |s: &str| eog.iter().any(|&i| p.texts[i as usize] == s);
        if (has("<|return|>") && has("<|call|>")) || (has("<|calls|>") && has("<|flush|>")) {
            eog.retain(|&i| p.texts[i as usize] != "<|end|>");
        }
        for &id in &eog {
            let k = &mut p.kinds[id as usize];
            if !k.is_special() {
                *k = TokenKind::Control;
            }
        }
        let pieces = p
            .texts
            .iter()
            .zip(&p.kinds)
            .map(|(t, &k)| render_piece(t, k, p.style).into_boxed_slice())
            .collect();
        Ok(Tokenizer {
            texts: p.texts,
            kinds: p.kinds,
            pieces,
            bos: p.bos,
            eos: p.eos,
            add_bos: p.add_bos,
            add_eos: p.add_eos,
            eog,
            add_space_prefix: p.add_space_prefix,
            clean_spaces: p.clean_spaces,
            chat_template: p.chat_template,
            backend,
        })
    }

    /// Reads `dir/tokenizer.json` and, when present, `tokenizer_config.json`,
    /// `generation_config.json`, `config.json` and `chat_template.jinja` beside it.
    pub fn from_hf_dir(dir: impl AsRef<std::path::Path>) -> Result<Tokenizer> {
        Self::from_hf_file(dir.as_ref().join("tokenizer.json"))
    }

    /// Reads a `tokenizer.json` (and the config files in its directory).
    pub fn from_hf_file(path: impl AsRef<std::path::Path>) -> Result<Tokenizer> {
        let (parts, backend) = hf::load(path.as_ref())?;
        Self::assemble(
            parts,
            Backend::Hf(Box::new(backend)),
            &path.as_ref().display().to_string(),
        )
    }

    /// The tokenizer stored in a GGUF file's metadata (`tokenizer.ggml.*`,
    /// `tokenizer.chat_template`); a vocabulary-only GGUF is enough.
    pub fn from_gguf(file: &crate::gguf::GgufFile) -> Result<Tokenizer> {
        let what = file.path().display().to_string();
        let (parts, backend) = llama::load(GgufVocab::from_gguf(file)?)?;
        Self::assemble(parts, Backend::Llama(Box::new(backend)), &what)
    }

    /// A tokenizer from a GGUF vocabulary already read into a [`GgufVocab`].
    pub fn from_gguf_vocab(vocab: GgufVocab) -> Result<Tokenizer> {
        let (parts, backend) = llama::load(vocab)?;
        Self::assemble(parts, Backend::Llama(Box::new(backend)), "gguf vocabulary")
    }

    /// `hf`, `bpe` (GGUF byte-level BPE) or `spm` (GGUF SentencePiece).
    pub fn kind_name(&self) -> &'static str {
        match &self.backend {
            Backend::Hf(_) => "hf",
            Backend::Llama(l) => l.kind_name(),
        }
    }

    /// Token ids of `text`. `add_special` adds BOS / EOS where the model asks for them;
    /// `parse_special` lets control tokens written in the text (`<|im_start|>`) be
    /// recognized (otherwise they are tokenized as plain text). User-defined tokens are
    /// always recognized.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        match &self.backend {
            Backend::Hf(h) => h.encode(text, parse_special, &mut out)?,
            Backend::Llama(l) => l.encode(self, text, parse_special, &mut out)?,
        }
        if add_special && self.add_eos {
            out.extend(self.eos);
        }
        Ok(out)
    }

    fn check_ids(&self, ids: &[u32]) -> Result<()> {
        match ids.iter().find(|&&i| i as usize >= self.texts.len()) {
            Some(bad) => Err(LlmError::tokenizer(
                "tokenizer",
                format!(
                    "token id {bad} is outside the vocabulary of {} tokens",
                    self.texts.len()
                ),
            )),
            None => Ok(()),
        }
    }

    /// The bytes of token `id` in decoded text; `special` renders control tokens.
    fn piece_bytes(&self, id: u32, special: bool) -> &[u8] {
        let i = id as usize;
        if !special && self.kinds[i].is_special() {
            return &[];
        }
        &self.pieces[i]
    }

    /// Text of `ids`. `skip_special` drops control tokens (and a leading BOS / trailing
    /// EOS the model adds). Bytes that do not form UTF-8 become U+FFFD. Ids outside the
    /// vocabulary are an error.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.check_ids(ids)?;
        let bytes = self.decode_bytes(ids, skip_special);
        let bytes = match self.clean_spaces {
            CleanSpaces::Off => bytes,
            CleanSpaces::Llama => clean_spaces_llama(&bytes),
            CleanSpaces::Hf => clean_spaces_hf(&bytes),
        };
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The raw bytes of `ids` (checked), without space cleaning.
    fn decode_bytes(&self, mut ids: &[u32], skip_special: bool) -> Vec<u8> {
        let mut remove_space = self.add_space_prefix;
        if skip_special && self.add_bos && !ids.is_empty() && Some(ids[0]) == self.bos {
            remove_space = false;
            ids = &ids[1..];
        }
        if skip_special && self.add_eos && !ids.is_empty() && ids.last().copied() == self.eos {
            ids = &ids[..ids.len() - 1];
        }
        let mut out = Vec::new();
        for &id in ids {
            let mut p = self.piece_bytes(id, !skip_special);
            if remove_space && p.first() == Some(&b' ') {
                p = &p[1..];
            }
            remove_space = false;
            out.extend_from_slice(p);
        }
        out
    }

    /// The text token `id` stands for (control tokens as written; partial UTF-8 as
    /// U+FFFD); empty for ids outside the vocabulary.
    pub fn piece(&self, id: u32) -> String {
        match self.pieces.get(id as usize) {
            Some(p) => String::from_utf8_lossy(p).into_owned(),
            None => String::new(),
        }
    }

    /// The token's string in the vocabulary (byte-level or `▁` form), if `id` is in it.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.texts.get(id as usize).map(String::as_str)
    }

    /// The id of a token's vocabulary string.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        match &self.backend {
            Backend::Hf(h) => h.token_id(text),
            Backend::Llama(l) => l.token_id(text),
        }
    }

    /// The token's kind; `None` outside the vocabulary.
    pub fn token_kind(&self, id: u32) -> Option<TokenKind> {
        self.kinds.get(id as usize).copied()
    }

    /// Number of token ids (largest id + 1).
    pub fn vocab_size(&self) -> usize {
        self.texts.len()
    }

    /// The BOS token.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// The EOS token.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// Whether `encode(.., add_special = true, ..)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` ends with EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Every token that ends generation (EOS, EOT, EOM, `<|im_end|>`, ...), sorted.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// Whether `id` ends generation.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// The chat template (Jinja) the model ships, if any.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// The text of the BOS / EOS tokens (for chat templates).
    pub fn bos_text(&self) -> Option<&str> {
        self.bos.and_then(|i| self.token_text(i))
    }

    /// The text of the EOS token.
    pub fn eos_text(&self) -> Option<&str> {
        self.eos.and_then(|i| self.token_text(i))
    }

    /// A streaming decoder over this tokenizer.
    pub fn stream(&self, skip_special: bool) -> StreamDecoder<'_> {
        StreamDecoder::new(self, skip_special)
    }
}

/// llama.cpp's `clean_spaces` passes over decoded bytes.
fn clean_spaces_llama(text: &[u8]) -> Vec<u8> {
    // 1: " ?", " !", " .", " ," lose the space.
    let mut a: Vec<u8> = Vec::with_capacity(text.len());
    for (i, &x) in text.iter().enumerate() {
        if i > 0 && text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            a.pop();
        }
        a.push(x);
    }
    // 2: " ' " becomes "'".
    let mut b: Vec<u8> = Vec::with_capacity(a.len());
    let mut i = 0;
    while i < a.len() {
        let x = a[i];
        if i > 0 && x == b'\'' && i + 1 < a.len() && a[i - 1] == b' ' && a[i + 1] == b' ' {
            b.pop();
            b.push(x);
            i += 2;
            continue;
        }
        b.push(x);
        i += 1;
    }
    // 3: " 's", " 'm", " 're", " 've" lose the space.
    let mut c: Vec<u8> = Vec::with_capacity(b.len());
    for (i, &x) in b.iter().enumerate() {
        if i > 0 && b[i - 1] == b' ' && x == b'\'' && i + 1 < b.len() {
            let x1 = b[i + 1];
            let x2 = b.get(i + 2).copied();
            let drop = matches!(x1, b's' | b'm')
                || (i + 2 < b.len() && matches!((x1, x2), (b'r', Some(b'e')) | (b'v', Some(b'e'))));
            if drop {
                c.pop();
            }
        }
        c.push(x);
    }
    c
}

/// transformers' `clean_up_tokenization`.
fn clean_spaces_hf(text: &[u8]) -> Vec<u8> {
    let s = String::from_utf8_lossy(text);
    let mut s = s.into_owned();
    for (from, to) in [
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ] {
        s = s.replace(from, to);
    }
    s.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_table_round_trips() {
        let t = byte_to_char_table();
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(t[b as usize]), Some(b));
        }
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(char_to_byte('a'), Some(b'a'));
        assert_eq!(char_to_byte('€'), None);
    }

    #[test]
    fn byte_tokens_parse() {
        assert_eq!(parse_byte_token("<0x0A>"), Some(10));
        assert_eq!(parse_byte_token("<0xff>"), Some(255));
        assert_eq!(parse_byte_token("<0x100>"), None);
        assert_eq!(parse_byte_token("0x0A"), None);
    }

    #[test]
    fn llama_space_cleaning() {
        let c = |s: &str| String::from_utf8(clean_spaces_llama(s.as_bytes())).unwrap();
        assert_eq!(c("Hello , world !"), "Hello, world!");
        assert_eq!(c("it ' s"), "it's");
        assert_eq!(c("he 's and we 're but I 'll"), "he's and we're but I 'll");
    }
}
