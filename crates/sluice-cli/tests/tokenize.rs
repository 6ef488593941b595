//! `sluice tokenize` on vocabulary-only GGUFs (the tokenizer fixtures of sluice-llm),
//! without a GPU.

use std::io::Read;
use std::path::PathBuf;
use std::process::Command;

fn sluice(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A fixture vocabulary, unpacked into a temporary file.
fn vocab(name: &str) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../sluice-llm/tests/fixtures/vocab")
        .join(format!("{name}.gguf.gz"));
    let gz = std::fs::read(&src).unwrap();
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut bytes)
        .unwrap();
    let dir = std::env::temp_dir().join(format!("sluice-cli-tok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.gguf"));
    std::fs::write(&path, bytes).unwrap();
    path
}

fn ids(stdout: &str) -> Vec<u64> {
    let v: serde_json::Value = serde_json::from_str(stdout).expect("JSON");
    v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn tokenize_gguf_vocab_json_and_pieces() {
    let qwen = vocab("ggml-vocab-qwen2");
    let m = qwen.to_str().unwrap();
    let (ok, out, err) = sluice(&["tokenize", "--model", m, "--text", "Hello world", "--json"]);
    assert!(ok, "{err}");
    assert_eq!(ids(&out), vec![9707, 1879]);
    let (ok, out, err) = sluice(&["tokenize", "--model", m, "--text", "Hello world"]);
    assert!(ok, "{err}");
    assert!(out.contains("9707 -> \"Hello\""), "{out}");
    assert!(out.contains("1879 -> \" world\""), "{out}");
    assert!(out.trim_end().ends_with("2 tokens"), "{out}");

    // Control tokens only with --parse-special.
    let chat = "<|im_start|>user";
    let (_, out, _) = sluice(&[
        "tokenize",
        "--model",
        m,
        "--text",
        chat,
        "--json",
        "--parse-special",
    ]);
    let parsed = ids(&out);
    assert_eq!(parsed.len(), 2, "{parsed:?}");
    let (_, out, _) = sluice(&["tokenize", "--model", m, "--text", chat, "--json"]);
    assert!(ids(&out).len() > 2);

    // --add-special adds BOS for Llama 3; --text-file reads the text.
    let llama = vocab("ggml-vocab-llama-bpe");
    let file = llama.with_extension("txt");
    std::fs::write(&file, "Hello").unwrap();
    let (ok, out, err) = sluice(&[
        "tokenize",
        "--model",
        llama.to_str().unwrap(),
        "--text-file",
        file.to_str().unwrap(),
        "--add-special",
        "--json",
    ]);
    assert!(ok, "{err}");
    assert_eq!(ids(&out)[0], 128000);

    // SmolLM2's real vocabulary.
    let smol = vocab("smollm2-135m-instruct");
    let (ok, out, err) = sluice(&[
        "tokenize",
        "--model",
        smol.to_str().unwrap(),
        "--text",
        "The capital of France is",
        "--json",
    ]);
    assert!(ok, "{err}");
    assert_eq!(ids(&out), vec![504, 3575, 282, 4649, 314]);
}

#[test]
fn tokenize_errors_are_clear() {
    let (ok, _, err) = sluice(&["tokenize", "--model", "/nonexistent.gguf", "--text", "x"]);
    assert!(!ok);
    assert!(err.contains("/nonexistent.gguf"), "{err}");
    let (ok, _, err) = sluice(&["tokenize", "--model", "/nonexistent.gguf"]);
    assert!(!ok);
    assert!(err.contains("--text"), "{err}");
    let (ok, _, err) = sluice(&[
        "tokenize",
        "--model",
        "x",
        "--text",
        "a",
        "--text-file",
        "b",
    ]);
    assert!(!ok);
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn tokenize_hf_directory_and_file() {
    // 256 byte-level tokens, no merges: every byte is its own token.
    let mut vocab = serde_json::Map::new();
    let mut n = 0;
    for b in 0..=255u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let c = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
        vocab.insert(char::from_u32(c).unwrap().to_string(), serde_json::json!(b));
    }
    let json = serde_json::json!({
        "version": "1.0", "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
            "vocab": vocab, "merges": []}
    });
    let dir = std::env::temp_dir().join(format!("sluice-cli-tokhf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tokenizer.json");
    std::fs::write(&file, json.to_string()).unwrap();
    for model in [&dir, &file] {
        let (ok, out, err) = sluice(&[
            "tokenize",
            "--model",
            model.to_str().unwrap(),
            "--text",
            "hi é",
            "--json",
        ]);
        assert!(ok, "{err}");
        assert_eq!(ids(&out), vec![104, 105, 32, 0xC3, 0xA9]);
    }
    std::fs::remove_dir_all(&dir).ok();
}
