//! The batched engine from the command line: `sluice bench --sequences` reports one row per
//! sequence count with its step latencies, and `sluice profile --sequences` times the
//! batched step's ops (one dispatch per op for all sequences).

use std::process::Command;

fn sluice(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn bench_sequences_reports_a_row_per_count() {
    let out = sluice(&[
        "bench",
        "--model",
        "synthetic:tiny",
        "--sequences",
        "1,3",
        "-p",
        "5",
        "-n",
        "4",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v.as_array().expect("one object per count");
    assert_eq!(rows.len(), 2, "{out}");
    for (r, want) in rows.iter().zip([1, 3]) {
        let row = &r["row"];
        assert_eq!(row["sequences"], want, "{out}");
        assert_eq!(
            (row["prompt"].as_u64(), row["n_gen"].as_u64()),
            (Some(5), Some(4))
        );
        let (mean, p50, p99) = (
            row["step_ms_mean"].as_f64().unwrap(),
            row["step_ms_p50"].as_f64().unwrap(),
            row["step_ms_p99"].as_f64().unwrap(),
        );
        assert!(mean > 0.0 && p50 > 0.0 && p99 >= p50, "{row}");
        // Every step advances every sequence: tokens/s = sequences / step time, roughly.
        let tg = row["tg_tok_s"].as_f64().unwrap();
        let from_steps = want as f64 * 1e3 / mean;
        assert!(
            (tg / from_steps - 1.0).abs() < 0.25,
            "tg {tg} vs {from_steps}: {row}"
        );
        // The same ops as a single-sequence step: dispatches do not grow with the batch.
        assert_eq!(
            row["dispatches_per_step"],
            rows[0]["row"]["dispatches_per_step"]
        );
    }
}

#[test]
fn profile_sequences_times_the_batched_ops() {
    let out = std::env::temp_dir().join(format!("sluice-profile-batch-{}", std::process::id()));
    let o = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "profile",
            "--model",
            "synthetic:tiny",
            "--sequences",
            "3",
            "-n",
            "2",
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("run sluice");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    let _ = std::fs::remove_dir_all(&out);
    for op in [
        "batch.embed",
        "batch.attention",
        "batch.mlp.down",
        "batch.lm_head",
        "batch.argmax",
    ] {
        assert!(
            table.lines().any(|l| l.starts_with(&format!("| {op} "))),
            "{op} missing:\n{table}"
        );
    }
}
