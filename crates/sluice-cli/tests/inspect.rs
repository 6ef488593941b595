//! `sluice inspect`: a GGUF file's summary without a GPU; a file that is not GGUF is a
//! clear error.

use std::process::Command;

fn sluice(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn inspect_summarises_a_gguf_and_refuses_other_files() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sluice-llm/tests/fixtures/quant_blocks.gguf"
    );
    let (code, out, err) = sluice(&["inspect", "--model", fixture]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("GGUF v3"), "{out}");
    assert!(out.contains("tensors"), "{out}");
    let (code, _, err) = sluice(&["inspect", "--model", env!("CARGO_MANIFEST_DIR")]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.starts_with("sluice: error:") && !err.contains("panicked"),
        "{err}"
    );
}
