//! Tokenizers against llama.cpp's own tokenizer tests: the vocabulary-only GGUFs of
//! llama.cpp's `models/` (gzip-compressed here) with their `.inp` texts and `.out` ids,
//! through the GGUF path and, rebuilt as `tokenizer.json`, through the Hugging Face path;
//! plus the real SmolLM2 vocabulary against ids from a fixture file.

use std::io::Read;
use std::path::{Path, PathBuf};

use sluice_llm::chat::{ChatTemplate, Message};
use sluice_llm::gguf::GgufFile;
use sluice_llm::tokenizer::{GgufVocab, StreamDecoder, Tokenizer};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vocab")
}

fn gguf(name: &str) -> GgufFile {
    let path = fixture_dir().join(name);
    let gz = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut bytes)
        .unwrap();
    GgufFile::from_bytes(path, bytes).unwrap()
}

/// llama.cpp's test cases: texts separated by `\n__ggml_vocab_test__\n`, one line of
/// ids per text.
fn cases(vocab: &str) -> Vec<(String, Vec<u32>)> {
    let dir = fixture_dir();
    let inp = std::fs::read_to_string(dir.join(format!("ggml-vocab-{vocab}.gguf.inp"))).unwrap();
    let out = std::fs::read_to_string(dir.join(format!("ggml-vocab-{vocab}.gguf.out"))).unwrap();
    let mut texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    assert_eq!(texts.pop(), Some(""), "the .inp file ends with a separator");
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(texts.len(), ids.len(), "{vocab}: .inp and .out disagree");
    texts.into_iter().map(str::to_string).zip(ids).collect()
}

/// Encodes every case; returns the ones that differ (text, expected, got).
fn mismatches(tok: &Tokenizer, cases: &[(String, Vec<u32>)]) -> Vec<String> {
    cases
        .iter()
        .filter_map(|(text, want)| {
            let got = tok.encode(text, false, false).unwrap();
            (&got != want).then(|| format!("{text:?}\n  want {want:?}\n  got  {got:?}"))
        })
        .collect()
}

fn check_gguf(vocab: &str, kind: &str, expected_cases: usize) -> Tokenizer {
    let tok = Tokenizer::from_gguf(&gguf(&format!("ggml-vocab-{vocab}.gguf.gz"))).unwrap();
    assert_eq!(tok.kind_name(), kind);
    let cases = cases(vocab);
    assert_eq!(cases.len(), expected_cases);
    let bad = mismatches(&tok, &cases);
    assert!(
        bad.is_empty(),
        "{vocab}: {} of {} cases differ from llama.cpp:\n{}",
        bad.len(),
        cases.len(),
        bad.join("\n")
    );
    tok
}

#[test]
fn qwen2_gguf_matches_llama_cpp() {
    let tok = check_gguf("qwen2", "bpe", 46);
    // Decoding gives the text back (qwen2 does not clean spaces).
    for (text, ids) in cases("qwen2") {
        assert_eq!(tok.decode(&ids, false).unwrap(), text);
    }
    let im_end = tok.token_id("<|im_end|>").unwrap();
    let eot = tok.token_id("<|endoftext|>").unwrap();
    assert!(tok.is_eog(im_end) && tok.is_eog(eot));
    assert!(!tok.is_eog(tok.token_id("<|im_start|>").unwrap()));
    assert!(!tok.add_bos());
    assert!(tok.chat_template().is_some());
}

#[test]
fn llama_bpe_gguf_matches_llama_cpp() {
    let tok = check_gguf("llama-bpe", "bpe", 46);
    // Llama 3 adds <|begin_of_text|>.
    assert!(tok.add_bos());
    let bos = tok.bos().unwrap();
    assert_eq!(tok.token_text(bos), Some("<|begin_of_text|>"));
    let ids = tok.encode("Hello", true, false).unwrap();
    assert_eq!(ids[0], bos);
    assert_eq!(tok.decode(&ids, true).unwrap(), "Hello");
    assert!(tok.is_eog(tok.token_id("<|eot_id|>").unwrap()));
    assert!(tok.is_eog(tok.token_id("<|end_of_text|>").unwrap()));
}

#[test]
fn gpt2_gguf_matches_llama_cpp() {
    check_gguf("gpt-2", "bpe", 46);
}

#[test]
fn starcoder_gguf_matches_llama_cpp() {
    // Same pre-tokenizer regexes as `smollm`: single digits, then GPT-2's pattern.
    check_gguf("starcoder", "bpe", 46);
}

#[test]
fn llama_spm_gguf_matches_llama_cpp() {
    let tok = check_gguf("llama-spm", "spm", 46);
    assert!(tok.add_bos());
    assert_eq!(tok.bos(), Some(1));
    // Decoding drops the space SentencePiece put in front and rebuilds byte-fallback
    // characters.
    for (text, ids) in cases("llama-spm") {
        let back = tok.decode(&ids, false).unwrap();
        assert_eq!(back, text, "ids {ids:?}");
    }
}

#[test]
fn special_tokens_only_with_parse_special() {
    let tok = Tokenizer::from_gguf(&gguf("ggml-vocab-qwen2.gguf.gz")).unwrap();
    let start = tok.token_id("<|im_start|>").unwrap();
    let text = "<|im_start|>user\nhi";
    let parsed = tok.encode(text, false, true).unwrap();
    assert_eq!(parsed[0], start);
    let plain = tok.encode(text, false, false).unwrap();
    assert!(!plain.contains(&start));
    assert_eq!(tok.decode(&plain, false).unwrap(), text);
    // skip_special drops control tokens from the text.
    assert_eq!(tok.decode(&parsed, true).unwrap(), "user\nhi");
    assert_eq!(tok.decode(&parsed, false).unwrap(), text);
}

#[test]
fn stream_decoder_equals_decode_and_splits_no_character() {
    let tok = Tokenizer::from_gguf(&gguf("ggml-vocab-qwen2.gguf.gz")).unwrap();
    for (text, ids) in cases("qwen2") {
        let mut s = StreamDecoder::new(&tok, false);
        let mut out = String::new();
        for &id in &ids {
            let piece = s.push(id).unwrap();
            // Every chunk is whole characters: no replacement characters appear.
            assert!(!piece.contains('\u{FFFD}') || text.contains('\u{FFFD}'));
            out.push_str(&piece);
        }
        out.push_str(&s.flush());
        assert_eq!(out, text);
        assert_eq!(s.text(), text);
    }
    // A character split over byte tokens comes out once complete.
    let (ch, ids) = ["𠜎", "𓀀", "𝔘", "🦙"]
        .iter()
        .map(|c| (*c, tok.encode(c, false, false).unwrap()))
        .find(|(_, ids)| ids.len() > 1)
        .expect("a character that is several byte tokens");
    let mut s = tok.stream(false);
    let chunks: Vec<String> = ids.iter().map(|&i| s.push(i).unwrap()).collect();
    assert!(chunks[..ids.len() - 1].iter().all(String::is_empty));
    assert_eq!(chunks.last().unwrap(), ch);
    assert!(s.push(u32::MAX).is_err());
}

/// `tokenizer.json` for a GGUF byte-level vocabulary, as Hugging Face ships it for that
/// model family (pre-tokenizer regex, byte-level, control tokens as special added tokens).
fn hf_json(file: &GgufFile, pre_tokenizer: serde_json::Value, extra: serde_json::Value) -> String {
    let tokens = file.get_str_array("tokenizer.ggml.tokens").unwrap();
    let types = file.get_i32_array("tokenizer.ggml.token_type").unwrap();
    let merges = file.get_str_array("tokenizer.ggml.merges").unwrap();
    let vocab: serde_json::Map<String, serde_json::Value> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), serde_json::json!(i)))
        .collect();
    let added: Vec<serde_json::Value> = tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| types[*i] == 3)
        .map(|(i, t)| {
            serde_json::json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let mut model = serde_json::json!({"type": "BPE", "dropout": null, "unk_token": null,
        "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false,
        "byte_fallback": false, "vocab": vocab, "merges": merges});
    if let Some(o) = extra.as_object() {
        for (k, v) in o {
            model[k] = v.clone();
        }
    }
    serde_json::json!({
        "version": "1.0",
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": model,
    })
    .to_string()
}

fn split_then_bytes(regex: &str) -> serde_json::Value {
    serde_json::json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
    ]})
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-tok-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn check_hf(vocab: &str, pre: serde_json::Value, extra: serde_json::Value) {
    let file = gguf(&format!("ggml-vocab-{vocab}.gguf.gz"));
    let dir = temp_dir(vocab);
    std::fs::write(dir.join("tokenizer.json"), hf_json(&file, pre, extra)).unwrap();
    let tok = Tokenizer::from_hf_dir(&dir).unwrap();
    assert_eq!(tok.kind_name(), "hf");
    let cases = cases(vocab);
    let bad = mismatches(&tok, &cases);
    assert!(
        bad.is_empty(),
        "{vocab} through tokenizer.json: {} of {} cases differ from llama.cpp:\n{}",
        bad.len(),
        cases.len(),
        bad.join("\n")
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn qwen2_tokenizer_json_matches_llama_cpp() {
    check_hf(
        "qwen2",
        split_then_bytes(
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ),
        serde_json::json!({}),
    );
}

#[test]
fn llama3_tokenizer_json_matches_llama_cpp() {
    check_hf(
        "llama-bpe",
        split_then_bytes(
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ),
        serde_json::json!({"ignore_merges": true}),
    );
}

#[test]
fn gpt2_tokenizer_json_matches_llama_cpp() {
    check_hf(
        "gpt-2",
        serde_json::json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}),
        serde_json::json!({}),
    );
}

/// SmolLM2-135M-Instruct's vocabulary (pre-tokenizer `smollm`) against the ids in
/// `smollm2.prompts.json` (Hugging Face tokenizers, and llama.cpp where added).
#[test]
fn smollm2_matches_reference_ids() {
    let dir = fixture_dir();
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("smollm2.prompts.json")).unwrap())
            .unwrap();
    let file = gguf(spec["vocab"].as_str().unwrap());
    let tok = Tokenizer::from_gguf(&file).unwrap();
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(
        (tok.bos(), tok.eos(), tok.add_bos()),
        (Some(1), Some(2), false)
    );
    for id in [0, 2] {
        assert!(tok.is_eog(id), "{:?}", tok.token_text(id));
    }
    let prompts = spec["prompts"].as_array().unwrap();
    assert!(prompts.len() >= 8);
    let mut failures = Vec::new();
    for p in prompts {
        let text = p["text"].as_str().unwrap();
        let parse_special = p["parse_special"].as_bool().unwrap_or(true);
        let add_special = p["add_special"].as_bool().unwrap_or(false);
        let want: Vec<u32> = p["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(text, add_special, parse_special).unwrap();
        if got != want {
            failures.push(format!(
                "[{}] {text:?}\n  want {want:?}\n  got  {got:?}",
                p["source"]
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(
        tok.encode("The capital of France is", false, false)
            .unwrap()
            .len(),
        5
    );
}

/// The chat template stored in the SmolLM2 GGUF: ChatML with a default system prompt.
#[test]
fn smollm2_chat_template_renders_chatml() {
    let tok = Tokenizer::from_gguf(&gguf("smollm2-135m-instruct.gguf.gz")).unwrap();
    let src = tok.chat_template().unwrap();
    let t = ChatTemplate::new(
        src,
        tok.bos_text().unwrap_or(""),
        tok.eos_text().unwrap_or(""),
    )
    .unwrap();
    let out = t
        .render(&[Message::new("user", "What is 2+2?")], true)
        .unwrap();
    assert_eq!(
        out,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    );
    let ids = tok.encode(&out, false, true).unwrap();
    let im_start = tok.token_id("<|im_start|>").unwrap();
    assert_eq!(ids.iter().filter(|&&i| i == im_start).count(), 3);
    // With a system message the default one is not added.
    let out = t
        .render(
            &[
                Message::new("system", "Be brief."),
                Message::new("user", "Hi"),
            ],
            false,
        )
        .unwrap();
    assert_eq!(
        out,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    );
}

#[test]
fn oversized_vocabularies_are_refused_before_building() {
    let v = GgufVocab {
        model: "gpt2".into(),
        pre: Some("gpt-2".into()),
        tokens: vec![String::new(); sluice_llm::tokenizer::MAX_VOCAB + 1],
        merges: vec!["a b".into()],
        ..Default::default()
    };
    let e = Tokenizer::from_gguf_vocab(v).unwrap_err().to_string();
    assert!(e.contains("tokens"), "{e}");
    let v = GgufVocab {
        model: "gpt2".into(),
        pre: Some("gpt-2".into()),
        tokens: vec!["a".into(), "b".into()],
        merges: vec![String::new(); sluice_llm::tokenizer::MAX_MERGES + 1],
        ..Default::default()
    };
    let e = Tokenizer::from_gguf_vocab(v).unwrap_err().to_string();
    assert!(e.contains("merges"), "{e}");
}
