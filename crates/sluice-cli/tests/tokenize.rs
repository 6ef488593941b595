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
