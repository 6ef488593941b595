//! GGUF vocabularies, tokenized the way llama.cpp's `llama-vocab.cpp` does: special
//! tokens are cut out of the text first (longest first), then each remaining fragment is
//! split by the pre-tokenizer regexes of `tokenizer.ggml.pre` and merged by BPE rank
//! (`gpt2`), or merged by SentencePiece score with byte fallback (`llama`).

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};

use fancy_regex::Regex;

use super::{
    byte_to_char_table, CleanSpaces, Parts, PieceStyle, TokenKind, Tokenizer, MAX_MERGES,
    MAX_TOKEN_BYTES, MAX_VOCAB,
};
use crate::error::{LlmError, Result};

const WHAT: &str = "gguf vocabulary";

/// The `tokenizer.ggml.*` metadata of a GGUF file.
#[derive(Clone, Debug, Default)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: `gpt2` (byte-level BPE) or `llama` (SentencePiece).
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer name (`qwen2`, `llama-bpe`, `smollm`, ...).
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores` (SentencePiece merge priorities).
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.token_type`.
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.merges` (`"left right"`, by rank).
    pub merges: Vec<String>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// `tokenizer.ggml.eot_token_id`.
    pub eot: Option<u32>,
    /// `tokenizer.ggml.eom_token_id`.
    pub eom: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`.
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`.
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
}

impl GgufVocab {
    /// Reads the `tokenizer.*` keys of `file` (types checked; sizes are bounded when the
    /// tokenizer is built).
    pub fn from_gguf(file: &crate::gguf::GgufFile) -> Result<GgufVocab> {
        let what = file.path().display().to_string();
        let err = |msg: String| LlmError::tokenizer(what.clone(), msg);
        let model = file
            .get_str("tokenizer.ggml.model")
            .ok_or_else(|| err("no tokenizer.ggml.model: the file has no vocabulary".into()))?
            .to_string();
        let tokens = file
            .get_str_array("tokenizer.ggml.tokens")
            .ok_or_else(|| err("tokenizer.ggml.tokens is missing or not a list of strings".into()))?
            .to_vec();
        let scores = match file.get("tokenizer.ggml.scores") {
            None => None,
            Some(_) => Some(
                match (
                    file.get_f32_array("tokenizer.ggml.scores"),
                    file.get_i32_array("tokenizer.ggml.scores"),
                ) {
                    (Some(f), _) => f.to_vec(),
                    (None, Some(i)) => i.iter().map(|&x| x as f32).collect(),
                    _ => {
                        return Err(err(
                            "tokenizer.ggml.scores is not a list of f32 or i32".into()
                        ))
                    }
                },
            ),
        };
        let token_types = match file.get("tokenizer.ggml.token_type") {
            None => None,
            Some(_) => Some(
                file.get_i32_array("tokenizer.ggml.token_type")
                    .ok_or_else(|| err("tokenizer.ggml.token_type is not a list of i32".into()))?
                    .to_vec(),
            ),
        };
        let merges = match file.get("tokenizer.ggml.merges") {
            None => Vec::new(),
            Some(_) => file
                .get_str_array("tokenizer.ggml.merges")
                .ok_or_else(|| err("tokenizer.ggml.merges is not a list of strings".into()))?
                .to_vec(),
        };
        if model == "gpt2" && merges.is_empty() {
            return Err(err("a gpt2 vocabulary needs tokenizer.ggml.merges".into()));
        }
        let id = |k: &str| {
            file.get_u64(&format!("tokenizer.ggml.{k}"))
                .and_then(|v| u32::try_from(v).ok())
        };
        let flag = |k: &str| file.get_bool(&format!("tokenizer.ggml.{k}"));
        Ok(GgufVocab {
            model,
            pre: file.get_str("tokenizer.ggml.pre").map(str::to_string),
            tokens,
            scores,
            token_types,
            merges,
            bos: id("bos_token_id"),
            eos: id("eos_token_id"),
            eot: id("eot_token_id"),
            eom: id("eom_token_id"),
            unk: id("unknown_token_id"),
            pad: id("padding_token_id"),
            add_bos: flag("add_bos_token"),
            add_eos: flag("add_eos_token"),
            add_space_prefix: flag("add_space_prefix"),
            chat_template: file.get_str("tokenizer.chat_template").map(str::to_string),
        })
    }
}

/// Pre-tokenizer settings llama.cpp ties to a `tokenizer.ggml.pre` name.
struct PreSettings {
    regexes: &'static [&'static str],
    ignore_merges: bool,
    add_bos: bool,
    clean_spaces: bool,
}

const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const DEFAULT: &[&str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"];

/// The names this module knows (for the error message).
const KNOWN_PRE: &str = "default, gpt-2 (phi-2, olmo, mpt, jais), llama-bpe (llama3, llama-v3, \
     falcon3, pixtral, dbrx, smaug-bpe, glm4, chatglm-bpe), qwen2 (deepseek-r1-qwen, stablelm2, \
     megrez), smollm (starcoder, refact, command-r, codeshell, exaone, minerva-7b)";

fn pre_settings(pre: &str) -> Option<PreSettings> {
    let s = |regexes, ignore_merges, add_bos, clean_spaces| PreSettings {
        regexes,
        ignore_merges,
        add_bos,
        clean_spaces,
    };
    Some(match pre {
        "" | "default" => s(DEFAULT, false, false, true),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" => s(&[LLAMA3], true, true, true),
        "dbrx" | "smaug-bpe" => s(&[LLAMA3], false, false, true),
        "glm4" | "chatglm-bpe" => s(&[LLAMA3], false, false, true),
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "mpt" | "olmo" | "jais" | "exaone4" => {
            s(&[GPT2], false, false, true)
        }
        "qwen2" | "deepseek-r1-qwen" | "kormo" => s(&[QWEN2], false, false, false),
        "stablelm2" | "megrez" => s(&[QWEN2], false, false, true),
        "smollm" | "command-r" => s(&[r"\p{N}", GPT2], false, false, false),
        "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
            s(&[r"\p{N}", GPT2], false, false, true)
        }
        _ => return None,
    })
}

enum Model {
    Bpe {
        regexes: Vec<Regex>,
        ignore_merges: bool,
        /// `"left right"` -> rank.
        ranks: HashMap<String, u32>,
        byte_char: [char; 256],
    },
    Spm {
        scores: Vec<f32>,
        unk: Option<u32>,
    },
}

/// The GGUF side of a [`Tokenizer`].
pub(super) struct LlamaBackend {
    token_to_id: HashMap<String, u32>,
    /// Control, user-defined and unknown tokens, longest text first.
    special_cache: Vec<u32>,
    model: Model,
}

fn bad(msg: impl Into<String>) -> LlmError {
    LlmError::tokenizer(WHAT, msg)
}

/// Checks the vocabulary and builds the tokenizer parts (llama.cpp's `llama_vocab::load`).
pub(super) fn load(v: GgufVocab) -> Result<(Parts, LlamaBackend)> {
    let n = v.tokens.len();
    if n == 0 {
        return Err(bad("tokenizer.ggml.tokens is empty"));
    }
    if n > MAX_VOCAB {
        return Err(bad(format!(
            "{n} tokens: more than the {MAX_VOCAB} this reader accepts"
        )));
    }
    if v.merges.len() > MAX_MERGES {
        return Err(bad(format!(
            "{} merges: more than the {MAX_MERGES} this reader accepts",
            v.merges.len()
        )));
    }
    if let Some(s) = &v.scores {
        if s.len() < n {
            return Err(bad(format!("{} scores for {n} tokens", s.len())));
        }
    }
    if let Some(t) = &v.token_types {
        if t.len() < n {
            return Err(bad(format!("{} token types for {n} tokens", t.len())));
        }
    }
    let spm = match v.model.as_str() {
        "llama" => true,
        "gpt2" => false,
        other => {
            return Err(bad(format!(
                "tokenizer model {other:?} is not supported (supported: gpt2, llama)"
            )))
        }
    };
    let pre = v.pre.clone().unwrap_or_default();
    let settings = if spm {
        None
    } else {
        Some(pre_settings(&pre).ok_or_else(|| {
            bad(format!(
                "pre-tokenizer {pre:?} is not supported (supported: {KNOWN_PRE})"
            ))
        })?)
    };

    let mut texts = Vec::with_capacity(n);
    let mut token_to_id = HashMap::with_capacity(n);
    for (i, t) in v.tokens.into_iter().enumerate() {
        if t.len() > MAX_TOKEN_BYTES {
            return Err(bad(format!(
                "token {i} is {} bytes long (limit {MAX_TOKEN_BYTES})",
                t.len()
            )));
        }
        // As llama.cpp: an empty token gets a placeholder name (it must never match text).
        let t = if t.is_empty() {
            format!("[EMPTY_{i}]")
        } else {
            t
        };
        if let Some(prev) = token_to_id.insert(t.clone(), i as u32) {
            return Err(bad(format!(
                "duplicate token {t:?} with ids {prev} and {i}"
            )));
        }
        texts.push(t);
    }
    let mut kinds: Vec<TokenKind> = match &v.token_types {
        Some(t) => t[..n].iter().map(|&x| TokenKind::from_gguf(x)).collect(),
        None => vec![TokenKind::Normal; n],
    };
    // gpt-oss: these always render.
    for s in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
        if let Some(&id) = token_to_id.get(s) {
            kinds[id as usize] = TokenKind::UserDefined;
        }
    }

    // Special ids: llama.cpp's defaults, replaced by the file's when in range.
    let (mut bos, mut eos, mut unk) = if spm {
        (Some(1), Some(2), Some(0))
    } else {
        (Some(11), Some(11), None)
    };
    let pick = |default: Option<u32>, key: Option<u32>| -> Option<u32> {
        let default = default.filter(|&i| (i as usize) < n);
        match key {
            Some(i) if (i as usize) < n => Some(i),
            _ => default,
        }
    };
    bos = pick(bos, v.bos);
    eos = pick(eos, v.eos);
    unk = pick(unk, v.unk);
    let eot = pick(None, v.eot);
    let eom = pick(None, v.eom);
    // FIM pad / repo / file-separator tokens end generation in llama.cpp too.
    let mut eog_extra: Vec<u32> = [eot, eom].into_iter().flatten().collect();
    for s in [
        "<|fim_pad|>",
        "<fim-pad>",
        "<fim_pad>",
        "<PAD>",
        "[PAD]",
        "<|fim_repo|>",
        "<|repo_name|>",
        "<fim-repo>",
        "<REPO>",
        "<reponame>",
        "<|file_sep|>",
    ] {
        if let Some(&id) = token_to_id.get(s) {
            eog_extra.push(id);
        }
    }
    let _ = v.pad;

    let (add_bos_default, add_space_prefix_default, clean) = match &settings {
        None => (true, true, false),
        Some(s) => (s.add_bos, false, s.clean_spaces),
    };
    let add_bos = v.add_bos.unwrap_or(add_bos_default);
    let add_eos = v.add_eos.unwrap_or(false);
    let add_space_prefix = v.add_space_prefix.unwrap_or(add_space_prefix_default);

    let model = match settings {
        None => {
            let scores = match v.scores {
                Some(mut s) => {
                    s.truncate(n);
                    s
                }
                None => vec![0.0; n],
            };
            Model::Spm { scores, unk }
        }
        Some(s) => {
            let regexes = s
                .regexes
                .iter()
                .map(|r| Regex::new(r).map_err(|e| bad(format!("regex {r:?}: {e}"))))
                .collect::<Result<Vec<_>>>()?;
            let mut ranks = HashMap::with_capacity(v.merges.len());
            for (rank, m) in v.merges.into_iter().enumerate() {
                // llama.cpp splits at the first space after the first byte.
                let has_space = m.as_bytes().iter().skip(1).any(|&b| b == b' ');
                if !has_space {
                    continue;
                }
                let key = m;
                ranks.entry(key).or_insert(rank as u32);
            }
            Model::Bpe {
                regexes,
                ignore_merges: s.ignore_merges,
                ranks,
                byte_char: byte_to_char_table(),
            }
        }
    };

    let mut special_cache: Vec<u32> = (0..n as u32)
        .filter(|&i| {
            matches!(
                kinds[i as usize],
                TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown
            )
        })
        .collect();
    special_cache.sort_by_key(|&i| Reverse(texts[i as usize].len()));

    let parts = Parts {
        texts,
        kinds,
        style: if spm {
            PieceStyle::Metaspace
        } else {
            PieceStyle::ByteLevel
        },
        bos,
        eos,
        add_bos,
        add_eos,
        eog_extra,
        add_space_prefix,
        clean_spaces: if clean {
            CleanSpaces::Llama
        } else {
            CleanSpaces::Off
        },
        chat_template: v.chat_template,
    };
    Ok((
        parts,
        LlamaBackend {
            token_to_id,
            special_cache,
            model,
        },
    ))
}

/// A piece of the text being tokenized: raw text (byte range) or a special token.
#[derive(Clone, Copy, Debug)]
enum Fragment {
    Text(usize, usize),
    Token(u32),
}

impl LlamaBackend {
    pub(super) fn kind_name(&self) -> &'static str {
        match self.model {
            Model::Bpe { .. } => "bpe",
            Model::Spm { .. } => "spm",
        }
    }

    pub(super) fn token_id(&self, text: &str) -> Option<u32> {
        self.token_to_id.get(text).copied()
    }

    /// Cuts special tokens out of `text` (llama.cpp's `tokenizer_st_partition`).
    fn partition(&self, tok: &Tokenizer, text: &str, parse_special: bool) -> Vec<Fragment> {
        let mut frags = vec![Fragment::Text(0, text.len())];
        if text.is_empty() {
            return Vec::new();
        }
        for &id in &self.special_cache {
            let kind = tok.kinds[id as usize];
            if !parse_special && kind.is_special() {
                continue;
            }
            let needle = tok.texts[id as usize].as_str();
            if needle.is_empty() {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len());
            for f in frags {
                let Fragment::Text(mut a, b) = f else {
                    next.push(f);
                    continue;
                };
                while let Some(p) = text[a..b].find(needle) {
                    if p > 0 {
                        next.push(Fragment::Text(a, a + p));
                    }
                    next.push(Fragment::Token(id));
                    a += p + needle.len();
                }
                if a < b {
                    next.push(Fragment::Text(a, b));
                }
            }
            frags = next;
        }
        frags
    }

    pub(super) fn encode(
        &self,
        tok: &Tokenizer,
        text: &str,
        parse_special: bool,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let frags = self.partition(tok, text, parse_special);
        let mut prev_special = true;
        for f in frags {
            match f {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(a, b) => {
                    let piece = &text[a..b];
                    match &self.model {
                        Model::Bpe {
                            regexes,
                            ignore_merges,
                            ranks,
                            byte_char,
                        } => {
                            for word in regex_split(piece, regexes)? {
                                let encoded: String =
                                    word.bytes().map(|b| byte_char[b as usize]).collect();
                                self.bpe_word(&encoded, *ignore_merges, ranks, out);
                            }
                        }
                        Model::Spm { scores, unk } => {
                            let mut s = String::with_capacity(piece.len() + 3);
                            if tok.add_space_prefix && prev_special {
                                s.push(' ');
                            }
                            s.push_str(piece);
                            let s = s.replace(' ', "\u{2581}");
                            self.spm(&s, scores, *unk, out);
                        }
                    }
                    prev_special = false;
                }
            }
        }
        Ok(())
    }

    /// BPE over one pre-token (already in byte-level characters).
    fn bpe_word(
        &self,
        word: &str,
        ignore_merges: bool,
        ranks: &HashMap<String, u32>,
        out: &mut Vec<u32>,
    ) {
        if word.is_empty() {
            return;
        }
        if ignore_merges {
            if let Some(&id) = self.token_to_id.get(word) {
                out.push(id);
                return;
            }
        }
        let mut syms = symbols(word);
        let mut key = String::new();
        let mut heap: BinaryHeap<Reverse<(u32, usize, usize, usize)>> = BinaryHeap::new();
        let rank_of = |syms: &[Sym], l: usize, r: usize, key: &mut String| -> Option<u32> {
            key.clear();
            key.push_str(&word[syms[l].start..syms[l].start + syms[l].len]);
            key.push(' ');
            key.push_str(&word[syms[r].start..syms[r].start + syms[r].len]);
            ranks.get(key.as_str()).copied()
        };
        let push =
            |heap: &mut BinaryHeap<_>, syms: &[Sym], l: usize, r: usize, key: &mut String| {
                if let Some(rank) = rank_of(syms, l, r, key) {
                    heap.push(Reverse((rank, l, r, syms[l].len + syms[r].len)));
                }
            };
        for i in 1..syms.len() {
            push(&mut heap, &syms, i - 1, i, &mut key);
        }
        while let Some(Reverse((_, l, r, size))) = heap.pop() {
            // Outdated: one side already merged elsewhere.
            if syms[l].len == 0 || syms[r].len == 0 || syms[l].next != Some(r) {
                continue;
            }
            if syms[l].len + syms[r].len != size {
                continue;
            }
            syms[l].len += syms[r].len;
            syms[r].len = 0;
            syms[l].next = syms[r].next;
            if let Some(nx) = syms[r].next {
                syms[nx].prev = Some(l);
            }
            if let Some(pv) = syms[l].prev {
                push(&mut heap, &syms, pv, l, &mut key);
            }
            if let Some(nx) = syms[l].next {
                push(&mut heap, &syms, l, nx, &mut key);
            }
        }
        let mut i = Some(0);
        while let Some(k) = i {
            let s = &syms[k];
            if s.len > 0 {
                let text = &word[s.start..s.start + s.len];
                match self.token_to_id.get(text) {
                    Some(&id) => out.push(id),
                    None => {
                        // As llama.cpp: each byte of the text as a one-byte token, when one exists.
                        for b in text.bytes() {
                            let mut one = [0u8; 4];
                            let c = (b as char).encode_utf8(&mut one);
                            if b < 0x80 {
                                if let Some(&id) = self.token_to_id.get(&*c) {
                                    out.push(id);
                                }
                            }
                        }
                    }
                }
            }
            i = s.next;
        }
    }

    /// SentencePiece BPE by score over `text` (spaces already `▁`), with byte fallback.
    fn spm(&self, text: &str, scores: &[f32], unk: Option<u32>, out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        let mut syms = symbols(text);
        let mut heap: BinaryHeap<SpmBigram> = BinaryHeap::new();
        let mut rev_merge: HashMap<String, (usize, usize)> = HashMap::new();
        let try_add = |syms: &[Sym],
                       l: usize,
                       r: usize,
                       heap: &mut BinaryHeap<SpmBigram>,
                       rev: &mut HashMap<String, (usize, usize)>| {
            let s = &text[syms[l].start..syms[r].start + syms[r].len];
            if let Some(&id) = self.token_to_id.get(s) {
                heap.push(SpmBigram {
                    score: scores[id as usize],
                    left: l,
                    right: r,
                    size: s.len(),
                });
                rev.insert(s.to_string(), (l, r));
            }
        };
        for i in 1..syms.len() {
            try_add(&syms, i - 1, i, &mut heap, &mut rev_merge);
        }
        while let Some(bg) = heap.pop() {
            let (l, r) = (bg.left, bg.right);
            if syms[l].len == 0 || syms[r].len == 0 || syms[l].len + syms[r].len != bg.size {
                continue;
            }
            syms[l].len += syms[r].len;
            syms[r].len = 0;
            syms[l].next = syms[r].next;
            if let Some(nx) = syms[r].next {
                syms[nx].prev = Some(l);
            }
            if let Some(pv) = syms[l].prev {
                try_add(&syms, pv, l, &mut heap, &mut rev_merge);
            }
            if let Some(nx) = syms[l].next {
                try_add(&syms, l, nx, &mut heap, &mut rev_merge);
            }
        }
        let mut i = Some(0);
        while let Some(k) = i {
            if syms[k].len > 0 {
                self.resegment(text, &syms, k, &rev_merge, unk, out);
            }
            i = syms[k].next;
        }
    }

    /// A merged symbol as tokens: itself, the two it was made of, or its bytes.
    fn resegment(
        &self,
        text: &str,
        syms: &[Sym],
        k: usize,
        rev_merge: &HashMap<String, (usize, usize)>,
        unk: Option<u32>,
        out: &mut Vec<u32>,
    ) {
        let mut stack = vec![(syms[k].start, syms[k].len)];
        while let Some((start, len)) = stack.pop() {
            let s = &text[start..start + len];
            if let Some(&id) = self.token_to_id.get(s) {
                out.push(id);
                continue;
            }
            match rev_merge.get(s) {
                Some(&(l, r)) => {
                    // Right pushed first so the left part comes out first.
                    let (rs, ls) = (syms[r].start, syms[l].start);
                    stack.push((rs, start + len - rs));
                    stack.push((ls, rs - ls));
                }
                None => {
                    for b in s.bytes() {
                        let hex = format!("<0x{b:02X}>");
                        let id = self
                            .token_to_id
                            .get(&hex)
                            .or_else(|| {
                                let mut one = [0u8; 4];
                                if b < 0x80 {
                                    self.token_to_id.get(&*(b as char).encode_utf8(&mut one))
                                } else {
                                    None
                                }
                            })
                            .copied()
                            .or(unk);
                        out.extend(id);
                    }
                }
            }
        }
    }
}

/// One symbol of a word being merged: a byte range, linked to its neighbours.
#[derive(Clone, Copy, Debug)]
struct Sym {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// One symbol per UTF-8 character of `word`.
fn symbols(word: &str) -> Vec<Sym> {
    let count = word.chars().count();
    word.char_indices()
        .enumerate()
        .map(|(i, (start, c))| Sym {
            start,
            len: c.len_utf8(),
            prev: i.checked_sub(1),
            next: (i + 1 < count).then_some(i + 1),
        })
        .collect()
}

/// A SentencePiece merge candidate: highest score first, then leftmost.
struct SpmBigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl PartialEq for SpmBigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for SpmBigram {}
impl PartialOrd for SpmBigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for SpmBigram {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Splits `text` by each regex in turn: matches and the gaps between them become pieces
/// (llama.cpp's `unicode_regex_split`, Hugging Face's `Split` with `Isolated`).
fn regex_split<'t>(text: &'t str, regexes: &[Regex]) -> Result<Vec<&'t str>> {
    let mut pieces = vec![text];
    for re in regexes {
        let mut next = Vec::with_capacity(pieces.len() * 2);
        for p in pieces {
            let mut last = 0;
            for m in re.find_iter(p) {
                let m = m.map_err(|e| {
                    LlmError::tokenizer("tokenizer", format!("pre-tokenizer regex failed: {e}"))
                })?;
                if m.start() > last {
                    next.push(&p[last..m.start()]);
                }
                if m.end() > m.start() {
                    next.push(m.as_str());
                }
                last = m.end();
            }
            if last < p.len() {
                next.push(&p[last..]);
            }
        }
        pieces = next;
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn re(p: &str) -> Vec<Regex> {
        vec![Regex::new(p).unwrap()]
    }

    #[test]
    fn qwen2_split() {
        let r = re(QWEN2);
        assert_eq!(
            regex_split("Hello world", &r).unwrap(),
            vec!["Hello", " world"]
        );
        assert_eq!(
            regex_split("it's 42!", &r).unwrap(),
            vec!["it", "'s", " ", "4", "2", "!"]
        );
        assert_eq!(
            regex_split("a  b\n\nc", &r).unwrap(),
            vec!["a", " ", " b", "\n\n", "c"]
        );
    }

    #[test]
    fn llama3_groups_three_digits() {
        assert_eq!(
            regex_split("12345", &re(LLAMA3)).unwrap(),
            vec!["123", "45"]
        );
    }

    #[test]
    fn smollm_isolates_digits_then_gpt2() {
        let r: Vec<Regex> = [r"\p{N}", GPT2]
            .iter()
            .map(|p| Regex::new(p).unwrap())
            .collect();
        assert_eq!(
            regex_split("abc 123  x", &r).unwrap(),
            vec!["abc", " ", "1", "2", "3", " ", " x"]
        );
    }

    fn byte_level(s: &str) -> String {
        let t = byte_to_char_table();
        s.bytes().map(|b| t[b as usize]).collect()
    }

    /// A small byte-level vocabulary: all 256 bytes, then merged pieces, then specials.
    fn bpe_vocab(pre: &str) -> GgufVocab {
        let t = byte_to_char_table();
        let mut tokens: Vec<String> = t.iter().map(|c| c.to_string()).collect();
        let merged = [
            "he", "ll", "hell", "hello", "Ġw", "Ġwo", "Ġwor", "Ġworl", "Ġworld",
        ];
        tokens.extend(merged.iter().map(|s| s.to_string()));
        let mut types = vec![1; tokens.len()];
        tokens.push("<|im_start|>".into());
        types.push(3);
        tokens.push("<|im_end|>".into());
        types.push(3);
        tokens.push("<tool>".into());
        types.push(4);
        let merges = [
            "h e", "l l", "he ll", "hell o", "Ġ w", "Ġw o", "Ġwo r", "Ġwor l", "Ġworl d",
        ];
        GgufVocab {
            model: "gpt2".into(),
            pre: Some(pre.into()),
            tokens,
            token_types: Some(types),
            merges: merges.iter().map(|s| s.to_string()).collect(),
            eos: Some(266),
            ..Default::default()
        }
    }

    #[test]
    fn bpe_merges_by_rank_and_parses_specials_on_request() {
        let tok = Tokenizer::from_gguf_vocab(bpe_vocab("qwen2")).unwrap();
        assert_eq!(tok.kind_name(), "bpe");
        let hello = tok.token_id("hello").unwrap();
        let world = tok.token_id(&byte_level(" world")).unwrap();
        let start = tok.token_id("<|im_start|>").unwrap();
        let end = tok.token_id("<|im_end|>").unwrap();
        assert_eq!(
            tok.encode("<|im_start|>hello world", false, true).unwrap(),
            vec![start, hello, world]
        );
        // Without parse_special the control token is text: "<", "|", "im", ...
        let plain = tok.encode("<|im_start|>", false, false).unwrap();
        assert!(!plain.contains(&start));
        assert_eq!(tok.decode(&plain, false).unwrap(), "<|im_start|>");
        // User-defined tokens are always recognized.
        let tool = tok.token_id("<tool>").unwrap();
        assert_eq!(tok.encode("<tool>", false, false).unwrap(), vec![tool]);
        // EOS (id 266 = <|im_end|>) ends generation; decode skips it when asked.
        assert!(tok.is_eog(end));
        assert_eq!(tok.decode(&[hello, end], true).unwrap(), "hello");
        assert_eq!(tok.decode(&[hello, end], false).unwrap(), "hello<|im_end|>");
        // Unmerged bytes fall back to single-byte tokens.
        let ids = tok.encode("dew", false, false).unwrap();
        assert_eq!(ids, vec![b'd' as u32, b'e' as u32, b'w' as u32]);
    }

    #[test]
    fn empty_token_text_never_matches_and_encoding_ends() {
        let mut v = bpe_vocab("gpt-2");
        let n = v.tokens.len();
        v.tokens.push(String::new());
        v.token_types.as_mut().unwrap().push(4);
        let tok = Tokenizer::from_gguf_vocab(v).unwrap();
        assert_eq!(
            tok.token_text(n as u32),
            Some(format!("[EMPTY_{n}]").as_str())
        );
        let ids = tok.encode("hello", false, true).unwrap();
        assert_eq!(ids, vec![tok.token_id("hello").unwrap()]);
    }

    #[test]
    fn bad_vocabularies_are_errors() {
        let mut v = bpe_vocab("qwen2");
        v.pre = Some("no-such-pre".into());
        let e = Tokenizer::from_gguf_vocab(v).unwrap_err().to_string();
        assert!(e.contains("no-such-pre"), "{e}");
        let mut v = bpe_vocab("qwen2");
        v.tokens[260] = v.tokens[259].clone();
        let e = Tokenizer::from_gguf_vocab(v).unwrap_err().to_string();
        assert!(e.contains("duplicate"), "{e}");
        let mut v = bpe_vocab("qwen2");
        v.token_types.as_mut().unwrap().truncate(10);
        assert!(Tokenizer::from_gguf_vocab(v).is_err());
        let v = GgufVocab {
            model: "bert".into(),
            tokens: vec!["a".into()],
            ..Default::default()
        };
        assert!(Tokenizer::from_gguf_vocab(v)
            .unwrap_err()
            .to_string()
            .contains("bert"));
        let v = GgufVocab {
            model: "gpt2".into(),
            ..Default::default()
        };
        assert!(Tokenizer::from_gguf_vocab(v).is_err());
        // Asking for BOS without one.
        let mut v = bpe_vocab("qwen2");
        v.add_bos = Some(true);
        v.bos = Some(1_000_000);
        v.tokens.truncate(11);
        v.token_types.as_mut().unwrap().truncate(11);
        let e = Tokenizer::from_gguf_vocab(v).unwrap_err().to_string();
        assert!(e.contains("BOS"), "{e}");
    }

    #[test]
    fn decode_rejects_ids_outside_the_vocabulary() {
        let tok = Tokenizer::from_gguf_vocab(bpe_vocab("qwen2")).unwrap();
        let e = tok.decode(&[u32::MAX - 1], false).unwrap_err().to_string();
        assert!(e.contains("outside the vocabulary"), "{e}");
        assert_eq!(tok.piece(u32::MAX), "");
    }

    fn spm_vocab() -> GgufVocab {
        // <unk> <s> </s>, 256 byte tokens, then pieces with scores.
        let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
        let mut types = vec![2, 3, 3];
        let mut scores = vec![0.0, 0.0, 0.0];
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
            scores.push(0.0);
        }
        for (p, s) in [
            ("▁", -1.0),
            ("h", -2.0),
            ("e", -2.0),
            ("l", -2.0),
            ("o", -2.0),
            ("▁h", -3.0),
            ("ll", -3.5),
            ("▁he", -4.0),
            ("▁hell", -5.0),
            ("▁hello", -6.0),
        ] {
            tokens.push(p.into());
            types.push(1);
            scores.push(s);
        }
        GgufVocab {
            model: "llama".into(),
            tokens,
            scores: Some(scores),
            token_types: Some(types),
            ..Default::default()
        }
    }

    #[test]
    fn spm_merges_by_score_with_byte_fallback() {
        let tok = Tokenizer::from_gguf_vocab(spm_vocab()).unwrap();
        assert_eq!(tok.kind_name(), "spm");
        assert!(tok.add_bos());
        let hello = tok.token_id("▁hello").unwrap();
        assert_eq!(tok.encode("hello", true, false).unwrap(), vec![1, hello]);
        // "é" is not in the vocabulary: its two UTF-8 bytes.
        let ids = tok.encode("hello é", false, false).unwrap();
        let sp = tok.token_id("▁").unwrap();
        assert_eq!(ids, vec![hello, sp, 3 + 0xC3, 3 + 0xA9]);
        // Decoding drops the leading space the tokenizer added, and joins the bytes.
        assert_eq!(tok.decode(&ids, true).unwrap(), "hello é");
        assert_eq!(tok.decode(&[1, hello], true).unwrap(), " hello");
        assert_eq!(tok.decode(&[1, hello], false).unwrap(), "<s> hello");
    }
}
