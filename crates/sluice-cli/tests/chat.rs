//! `sluice chat` end to end on the tiny synthetic model written as a Hugging Face
//! directory with a byte-level tokenizer and a chat template (lavapipe in CI).

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::json;
use sluice_llm::safetensors::DType;
use sluice_llm::weights::write_synthetic_hf_dir;

/// 256 byte-level tokens (the tiny model's vocabulary), no merges.
fn tokenizer_json() -> String {
    let mut vocab = serde_json::Map::new();
    let mut n = 0;
    for b in 0..=255u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let c = if printable {
            char::from_u32(b).unwrap()
        } else {
            n += 1;
            char::from_u32(255 + n).unwrap()
        };
        vocab.insert(c.to_string(), json!(b));
    }
    json!({
        "version": "1.0", "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
            "vocab": vocab, "merges": []}
    })
    .to_string()
}

#[test]
fn chat_keeps_the_cache_between_turns() {
    let dir = std::env::temp_dir().join(format!("sluice-chat-{}", std::process::id()));
    write_synthetic_hf_dir(&dir, "tiny", DType::F16).unwrap();
    std::fs::write(dir.join("tokenizer.json"), tokenizer_json()).unwrap();
    let template = "{% for m in messages %}[{{ m.role }}]{{ m.content }}\n{% endfor %}\
                    {% if add_generation_prompt %}[assistant]{% endif %}";
    std::fs::write(
        dir.join("tokenizer_config.json"),
        json!({"chat_template": template, "eos_token": "~"}).to_string(),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "chat",
            "--model",
            dir.to_str().unwrap(),
            "-n",
            "6",
            "--context",
            "512",
            "-v",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello\nsecond turn\n/system Be brief.\nthird\n/reset\n\n/quit\nnever read\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let turns: Vec<&str> = stderr.lines().filter(|l| l.contains("turn:")).collect();
    assert_eq!(turns.len(), 3, "{stderr}");
    // First turn: nothing cached. Second: the first turn is in the cache and only the new
    // part is prefilled. Third (after /system): from position 0 again.
    assert!(
        turns[0].contains("0 in the cache") && turns[0].contains("at position 0"),
        "{stderr}"
    );
    assert!(!turns[1].contains("at position 0"), "{stderr}");
    assert!(
        turns[2].contains("0 in the cache") && turns[2].contains("at position 0"),
        "{stderr}"
    );
    assert!(stderr.contains("(system prompt set"), "{stderr}");
    assert!(stderr.contains("(conversation cleared)"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}
