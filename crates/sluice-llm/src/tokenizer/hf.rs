//! Hugging Face `tokenizer.json` through the `tokenizers` crate, with the settings that
//! live in the files beside it: `tokenizer_config.json` (`add_bos_token`,
//! `add_eos_token`, `bos_token`, `eos_token`, `chat_template`,
//! `clean_up_tokenization_spaces`), `generation_config.json` and `config.json`
//! (`eos_token_id`, a number or a list), `chat_template.jinja`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;

use super::{
    parse_byte_token, CleanSpaces, Parts, PieceStyle, TokenKind, MAX_MERGES, MAX_TOKEN_BYTES,
    MAX_VOCAB,
};
use crate::error::{LlmError, Result};

/// Largest `tokenizer.json` read (checked before reading).
const MAX_FILE_BYTES: u64 = 1 << 30;
/// Largest side config (`tokenizer_config.json`, ...) read.
const MAX_CONFIG_BYTES: u64 = 64 << 20;

/// The Hugging Face side of a tokenizer.
pub(super) struct HfBackend {
    /// `encode_special_tokens` is a setting of the tokenizer, toggled per call.
    tk: Mutex<tokenizers::Tokenizer>,
}

fn bad(path: &Path, msg: impl Into<String>) -> LlmError {
    LlmError::tokenizer(path.display().to_string(), msg)
}

fn read_text(path: &Path, limit: u64) -> Result<String> {
    let meta = std::fs::metadata(path).map_err(|e| LlmError::io(path, "open", e))?;
    if meta.len() > limit {
        return Err(bad(
            path,
            format!("file is {} bytes; the limit is {limit}", meta.len()),
        ));
    }
    std::fs::read_to_string(path).map_err(|e| LlmError::io(path, "read", e))
}

fn parse_json(path: &Path, text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| LlmError::Json {
        path: path.to_path_buf(),
        source: e,
    })
}

/// A side config file, if it exists.
fn read_config(path: PathBuf) -> Result<Option<Value>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = read_text(&path, MAX_CONFIG_BYTES)?;
    parse_json(&path, &text).map(Some)
}

/// An id from JSON, bounded.
fn json_id(v: &Value) -> Option<u32> {
    v.as_u64()
        .filter(|&i| (i as usize) < MAX_VOCAB)
        .map(|i| i as u32)
}

/// `5` or `[5, 7]` -> ids.
fn json_ids(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Array(a)) => a.iter().filter_map(json_id).collect(),
        Some(v) => json_id(v).into_iter().collect(),
        None => Vec::new(),
    }
}

/// `"<s>"` or `{"content": "<s>", ...}` -> the token text.
fn token_content(v: Option<&Value>) -> Option<&str> {
    match v? {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("content")?.as_str(),
        _ => None,
    }
}

/// Bounds and sanity of the parts of `tokenizer.json` the `tokenizers` crate would
/// otherwise take on trust.
fn check(path: &Path, json: &Value) -> Result<()> {
    let model = &json["model"];
    let vocab_len = match &model["vocab"] {
        Value::Object(o) => {
            for (k, v) in o {
                let id = v
                    .as_u64()
                    .ok_or_else(|| bad(path, format!("model.vocab[{k:?}] is not a token id")))?;
                if id as usize >= MAX_VOCAB {
                    return Err(bad(
                        path,
                        format!("model.vocab[{k:?}] = {id}: ids must be below {MAX_VOCAB}"),
                    ));
                }
            }
            o.len()
        }
        Value::Array(a) => a.len(),
        Value::Null => 0,
        _ => return Err(bad(path, "model.vocab is neither an object nor a list")),
    };
    if vocab_len > MAX_VOCAB {
        return Err(bad(
            path,
            format!("{vocab_len} tokens: more than the {MAX_VOCAB} this reader accepts"),
        ));
    }
    if let Some(m) = model["merges"].as_array() {
        if m.len() > MAX_MERGES {
            return Err(bad(
                path,
                format!(
                    "{} merges: more than the {MAX_MERGES} this reader accepts",
                    m.len()
                ),
            ));
        }
    }
    if let Some(added) = json["added_tokens"].as_array() {
        if added.len() > MAX_VOCAB {
            return Err(bad(path, format!("{} added tokens", added.len())));
        }
        for t in added {
            let id = t["id"]
                .as_u64()
                .ok_or_else(|| bad(path, "added token without id"))?;
            if id as usize >= MAX_VOCAB {
                return Err(bad(
                    path,
                    format!("added token id {id}: ids must be below {MAX_VOCAB}"),
                ));
            }
            let content = t["content"]
                .as_str()
                .ok_or_else(|| bad(path, format!("added token {id} has no content")))?;
            if content.is_empty() {
                return Err(bad(path, format!("added token {id} has empty content")));
            }
            if content.len() > MAX_TOKEN_BYTES {
                return Err(bad(
                    path,
                    format!("added token {id} is {} bytes long", content.len()),
                ));
            }
        }
    }
    Ok(())
}

/// How pieces decode, from the `decoder` (and `pre_tokenizer`) of `tokenizer.json`:
/// the style and whether the first piece loses a leading space.
fn piece_style(json: &Value) -> (PieceStyle, bool) {
    fn walk(d: &Value, style: &mut Option<PieceStyle>, strip: &mut bool) {
        match d["type"].as_str().unwrap_or("") {
            "ByteLevel" => *style = Some(PieceStyle::ByteLevel),
            "Metaspace" => {
                style.get_or_insert(PieceStyle::Metaspace);
                let scheme = d["prepend_scheme"].as_str().unwrap_or("");
                if scheme == "always"
                    || scheme == "first"
                    || d["add_prefix_space"].as_bool() == Some(true)
                {
                    *strip = true;
                }
            }
            "Replace" => {
                if d["pattern"]["String"].as_str() == Some("\u{2581}") {
                    style.get_or_insert(PieceStyle::Metaspace);
                }
            }
            "ByteFallback" => {
                style.get_or_insert(PieceStyle::Metaspace);
            }
            "Strip" => {
                if d["start"].as_u64().unwrap_or(0) > 0 {
                    *strip = true;
                }
            }
            "Sequence" => {
                for x in d["decoders"].as_array().into_iter().flatten() {
                    walk(x, style, strip);
                }
            }
            _ => {}
        }
    }
    let mut style = None;
    let mut strip = false;
    walk(&json["decoder"], &mut style, &mut strip);
    if style.is_none() {
        // No decoder: a byte-level pre-tokenizer still means byte-level pieces.
        let pre = json["pre_tokenizer"].to_string();
        if pre.contains("\"ByteLevel\"") {
            style = Some(PieceStyle::ByteLevel);
        }
    }
    (style.unwrap_or(PieceStyle::Raw), strip)
}

fn tk_err(path: &Path, e: impl std::fmt::Display) -> LlmError {
    bad(path, format!("tokenizers: {e}"))
}

pub(super) fn load(path: &Path) -> Result<(Parts, HfBackend)> {
    let text = read_text(path, MAX_FILE_BYTES)?;
    let json = parse_json(path, &text)?;
    check(path, &json)?;
    let tk: tokenizers::Tokenizer = text.parse().map_err(|e| tk_err(path, e))?;
    drop(text);

    let vocab = tk.get_vocab(true);
    let size = vocab.values().map(|&i| i as usize + 1).max().unwrap_or(0);
    if size == 0 {
        return Err(bad(path, "the vocabulary is empty"));
    }
    // check() bounded every id in the file; the crate adds none of its own.
    if size > MAX_VOCAB {
        return Err(bad(path, format!("token id {} is too large", size - 1)));
    }
    let mut texts = vec![String::new(); size];
    let mut kinds = vec![TokenKind::Unused; size];
    let byte_fallback = json["model"]["byte_fallback"].as_bool() == Some(true);
    let unk = json["model"]["unk_token"].as_str();
    for (t, id) in vocab {
        let i = id as usize;
        kinds[i] = if byte_fallback && parse_byte_token(&t).is_some() {
            TokenKind::Byte
        } else if Some(t.as_str()) == unk {
            TokenKind::Unknown
        } else {
            TokenKind::Normal
        };
        texts[i] = t;
    }
    for (id, t) in tk.get_added_tokens_decoder() {
        kinds[id as usize] = if t.special {
            TokenKind::Control
        } else {
            TokenKind::UserDefined
        };
    }
    let (style, add_space_prefix) = piece_style(&json);
    drop(json);

    let dir = path.parent().unwrap_or(Path::new("."));
    let tcfg = read_config(dir.join("tokenizer_config.json"))?;
    let gcfg = read_config(dir.join("generation_config.json"))?;
    let mcfg = read_config(dir.join("config.json"))?;
    let get = |v: &Option<Value>, k: &str| v.as_ref().and_then(|v| v.get(k)).cloned();
    let lookup = |s: Option<&str>| s.and_then(|s| tk.token_to_id(s));

    let gen_eos = json_ids(get(&gcfg, "eos_token_id").as_ref());
    let cfg_eos = json_ids(get(&mcfg, "eos_token_id").as_ref());
    let eos = lookup(token_content(get(&tcfg, "eos_token").as_ref()))
        .or_else(|| gen_eos.first().copied())
        .or_else(|| cfg_eos.first().copied());
    let bos = lookup(token_content(get(&tcfg, "bos_token").as_ref()))
        .or_else(|| {
            json_ids(get(&gcfg, "bos_token_id").as_ref())
                .first()
                .copied()
        })
        .or_else(|| {
            json_ids(get(&mcfg, "bos_token_id").as_ref())
                .first()
                .copied()
        });

    // Whether the post-processor adds BOS / EOS, when the config does not say.
    let probe = |add: bool| -> Result<Vec<u32>> {
        Ok(tk
            .encode("a", add)
            .map_err(|e| tk_err(path, e))?
            .get_ids()
            .to_vec())
    };
    let (with, without) = (probe(true)?, probe(false)?);
    let post_bos = bos.is_some() && with.first() == bos.as_ref() && without.first() != bos.as_ref();
    let post_eos = eos.is_some() && with.last() == eos.as_ref() && without.last() != eos.as_ref();
    let add_bos = get(&tcfg, "add_bos_token")
        .and_then(|v| v.as_bool())
        .unwrap_or(post_bos);
    let add_eos = get(&tcfg, "add_eos_token")
        .and_then(|v| v.as_bool())
        .unwrap_or(post_eos);
    let clean_spaces = match get(&tcfg, "clean_up_tokenization_spaces").and_then(|v| v.as_bool()) {
        Some(true) => CleanSpaces::Hf,
        _ => CleanSpaces::Off,
    };

    let chat_template = match get(&tcfg, "chat_template") {
        Some(Value::String(s)) => Some(s),
        Some(Value::Array(list)) => {
            let named = |n: &str| {
                list.iter()
                    .find(|t| t["name"].as_str() == Some(n))
                    .and_then(|t| t["template"].as_str())
            };
            named("default")
                .or_else(|| list.first().and_then(|t| t["template"].as_str()))
                .map(str::to_string)
        }
        _ => None,
    };
    let chat_template = match chat_template {
        Some(t) => Some(t),
        None => {
            let jinja = dir.join("chat_template.jinja");
            if jinja.is_file() {
                Some(read_text(&jinja, MAX_CONFIG_BYTES)?)
            } else {
                read_config(dir.join("chat_template.json"))?
                    .and_then(|v| v["chat_template"].as_str().map(str::to_string))
            }
        }
    };

    let mut eog_extra = gen_eos;
    eog_extra.extend(cfg_eos);
    let parts = Parts {
        texts,
        kinds,
        style,
        bos,
        eos,
        add_bos,
        add_eos,
        eog_extra,
        add_space_prefix,
        clean_spaces,
        chat_template,
    };
    Ok((parts, HfBackend { tk: Mutex::new(tk) }))
}

impl HfBackend {
    pub(super) fn encode(&self, text: &str, parse_special: bool, out: &mut Vec<u32>) -> Result<()> {
        let mut tk = self
            .tk
            .lock()
            .map_err(|_| LlmError::tokenizer("tokenizer", "a previous encode panicked"))?;
        tk.set_encode_special_tokens(!parse_special);
        let enc = tk
            .encode(text, false)
            .map_err(|e| LlmError::tokenizer("tokenizer", format!("tokenizers: {e}")))?;
        out.extend_from_slice(enc.get_ids());
        Ok(())
    }

    pub(super) fn token_id(&self, text: &str) -> Option<u32> {
        self.tk.lock().ok()?.token_to_id(text)
    }
}
