//! Hugging Face tokenizer directories: tokenizer.json with the settings beside it
//! (tokenizer_config.json, generation_config.json, chat_template.jinja), and bad files.

use std::path::PathBuf;

use serde_json::{json, Value};
use sluice_llm::tokenizer::{TokenKind, Tokenizer};

/// A byte-level BPE: 256 byte characters, merges building "hello" and " world", then
/// `<s>` `</s>` `<|im_end|>` (special) and `<tool>` (not special) with ids 265..=268
/// (the `tokenizers` crate numbers added tokens after the vocabulary).
fn tokenizer_json(post_processor: Value) -> Value {
    let mut vocab = serde_json::Map::new();
    let mut n = 0;
    let mut byte_char = Vec::new();
    for b in 0..=255u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let c = if printable {
            char::from_u32(b).unwrap()
        } else {
            n += 1;
            char::from_u32(255 + n).unwrap()
        };
        byte_char.push(c);
        vocab.insert(c.to_string(), json!(b));
    }
    let pieces = [
        "he", "ll", "hell", "hello", "Ġw", "Ġwo", "Ġwor", "Ġworl", "Ġworld",
    ];
    for (i, p) in pieces.iter().enumerate() {
        vocab.insert(p.to_string(), json!(256 + i));
    }
    let merges = [
        "h e", "l l", "he ll", "hell o", "Ġ w", "Ġw o", "Ġwo r", "Ġwor l", "Ġworl d",
    ];
    let added = |id: u32, content: &str, special: bool| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": special})
    };
    json!({
        "version": "1.0",
        "added_tokens": [added(265, "<s>", true), added(266, "</s>", true),
            added(267, "<|im_end|>", true), added(268, "<tool>", false)],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": post_processor,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
            "vocab": vocab, "merges": merges}
    })
}

fn dir(tag: &str, files: &[(&str, String)]) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-tokhf-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    for (name, text) in files {
        std::fs::write(d.join(name), text).unwrap();
    }
    d
}

const TEMPLATE: &str =
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor %}";

#[test]
fn configs_beside_tokenizer_json_are_honoured() {
    let d = dir(
        "cfg",
        &[
            ("tokenizer.json", tokenizer_json(Value::Null).to_string()),
            (
                "tokenizer_config.json",
                json!({"add_bos_token": true, "add_eos_token": false,
                    "bos_token": {"content": "<s>", "special": true}, "eos_token": "</s>",
                    "chat_template": TEMPLATE})
                .to_string(),
            ),
            (
                "generation_config.json",
                json!({"eos_token_id": [266, 267]}).to_string(),
            ),
        ],
    );
    let tok = Tokenizer::from_hf_dir(&d).unwrap();
    assert_eq!(tok.kind_name(), "hf");
    assert_eq!(tok.vocab_size(), 269);
    assert_eq!(
        (tok.bos(), tok.eos(), tok.add_bos()),
        (Some(265), Some(266), true)
    );
    assert_eq!(tok.eog_ids(), &[266, 267]);
    assert!(tok.is_eog(267) && !tok.is_eog(265));
    assert_eq!(tok.chat_template(), Some(TEMPLATE));
    assert_eq!(tok.token_kind(265), Some(TokenKind::Control));
    assert_eq!(tok.token_kind(268), Some(TokenKind::UserDefined));

    // BOS added; merges applied; special tokens parsed only when asked.
    assert_eq!(
        tok.encode("hello world", true, false).unwrap(),
        vec![265, 259, 264]
    );
    assert_eq!(
        tok.encode("hello<|im_end|>", false, true).unwrap(),
        vec![259, 267]
    );
    let plain = tok.encode("hello<|im_end|>", false, false).unwrap();
    assert!(!plain.contains(&267), "{plain:?}");
    assert_eq!(tok.decode(&plain, false).unwrap(), "hello<|im_end|>");
    // Non-special added tokens are always recognized.
    assert_eq!(tok.encode("<tool>", false, false).unwrap(), vec![268]);
    // decode: skip_special drops BOS and control tokens, keeps user-defined ones.
    assert_eq!(
        tok.decode(&[265, 259, 267, 268], true).unwrap(),
        "hello<tool>"
    );
    assert_eq!(
        tok.decode(&[265, 259, 267], false).unwrap(),
        "<s>hello<|im_end|>"
    );
    assert_eq!(tok.piece(264), " world");
    assert!(tok.decode(&[269], false).is_err());
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn bos_from_the_post_processor_and_template_from_jinja_file() {
    let post = json!({"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [265], "tokens": ["<s>"]}}});
    let d = dir(
        "post",
        &[
            ("tokenizer.json", tokenizer_json(post).to_string()),
            (
                "tokenizer_config.json",
                json!({"bos_token": "<s>", "eos_token": "<|im_end|>"}).to_string(),
            ),
            ("config.json", json!({"eos_token_id": 266}).to_string()),
            ("chat_template.jinja", TEMPLATE.to_string()),
        ],
    );
    let tok = Tokenizer::from_hf_dir(&d).unwrap();
    assert!(tok.add_bos());
    assert!(!tok.add_eos());
    assert_eq!(tok.encode("hello", true, false).unwrap(), vec![265, 259]);
    assert_eq!(tok.encode("hello", false, false).unwrap(), vec![259]);
    assert_eq!(tok.eos(), Some(267));
    assert_eq!(tok.eog_ids(), &[266, 267]);
    assert_eq!(tok.chat_template(), Some(TEMPLATE));
    std::fs::remove_dir_all(&d).ok();
}

fn load_err(tag: &str, json: Value) -> String {
    let d = dir(tag, &[("tokenizer.json", json.to_string())]);
    let e = Tokenizer::from_hf_dir(&d).unwrap_err().to_string();
    std::fs::remove_dir_all(&d).ok();
    e
}

#[test]
fn bad_tokenizer_files_are_clear_errors() {
    // An added token with empty content (would match everywhere).
    let mut j = tokenizer_json(Value::Null);
    j["added_tokens"][0]["content"] = json!("");
    let e = load_err("empty", j);
    assert!(e.contains("added token 265 has empty content"), "{e}");
    // An id near u32::MAX must not size a table.
    let mut j = tokenizer_json(Value::Null);
    j["added_tokens"][1]["id"] = json!(u32::MAX - 1);
    let e = load_err("bigadded", j);
    assert!(e.contains("4294967294") && e.contains("below"), "{e}");
    let mut j = tokenizer_json(Value::Null);
    j["model"]["vocab"]["hello"] = json!(3_000_000_000u64);
    let e = load_err("bigvocab", j);
    assert!(e.contains("3000000000"), "{e}");
    // Not JSON; missing file.
    let d = dir("notjson", &[("tokenizer.json", "{ nope".into())]);
    let e = Tokenizer::from_hf_dir(&d).unwrap_err().to_string();
    assert!(e.contains("invalid JSON"), "{e}");
    std::fs::remove_dir_all(&d).ok();
    let e = Tokenizer::from_hf_dir("/nonexistent/sluice")
        .unwrap_err()
        .to_string();
    assert!(e.contains("/nonexistent/sluice/tokenizer.json"), "{e}");
    // add_bos_token without a BOS token.
    let d = dir(
        "nobos",
        &[
            ("tokenizer.json", tokenizer_json(Value::Null).to_string()),
            (
                "tokenizer_config.json",
                json!({"add_bos_token": true}).to_string(),
            ),
        ],
    );
    let e = Tokenizer::from_hf_dir(&d).unwrap_err().to_string();
    assert!(e.contains("BOS"), "{e}");
    std::fs::remove_dir_all(&d).ok();
}
