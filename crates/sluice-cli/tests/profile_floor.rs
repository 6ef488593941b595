//! `sluice profile` writes a per-op table whose floor column is the op's weight bytes over
//! the measured read bandwidth.

use std::process::Command;

/// `sluice profile --model synthetic:tiny-256 -n 2 EXTRA...`: the contents of `file` in
/// its output directory (removed afterwards).
fn profile(tag: &str, extra: &[&str], file: &str) -> String {
    let out = std::env::temp_dir().join(format!("sluice-profile-{tag}-{}", std::process::id()));
    let o = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["profile", "--model", "synthetic:tiny-256", "-n", "2"])
        .args(extra)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run sluice");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(out.join(file)).unwrap();
    let _ = std::fs::remove_dir_all(&out);
    text
}

#[test]
fn profile_table_has_a_floor_per_weight_op() {
    let table = profile("floor", &[], "table.md");
    assert!(table.contains("measured read bandwidth"), "{table}");
    assert!(table.contains("to bring the clocks up"), "{table}");
    let gbs: f64 = table
        .split("read bandwidth (")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|v| v.parse().ok())
        .expect("bandwidth figure");
    assert!(gbs > 0.0, "{table}");
    // mlp.down reads [256, 512] f16 weights: its floor is those bytes at that bandwidth.
    let row = table
        .lines()
        .find(|l| l.starts_with("| mlp.down "))
        .expect("mlp.down row");
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let gpu_us: f64 = cells[3].parse().unwrap();
    let floor: f64 = cells[6].parse().unwrap();
    let above: f64 = cells[7].parse().unwrap();
    let count: f64 = cells[2].parse().unwrap();
    let want = count * (256.0 * 512.0 * 2.0) / (gbs * 1e3);
    assert!(
        (floor - want).abs() <= 0.05 + want * 0.05,
        "{row}: floor {floor} vs {want}"
    );
    assert!((gpu_us - floor - above).abs() < 0.2, "{row}");
}

/// The batched step's embedding reads one row per sequence, not the table it binds: its
/// floor is those rows' bytes.
#[test]
fn batched_profile_counts_the_embedding_rows_it_reads() {
    let ops: serde_json::Value =
        serde_json::from_str(&profile("embed", &["--sequences", "2"], "ops.json")).unwrap();
    let embed = ops
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["op"] == "batch.embed")
        .expect("batch.embed op");
    // Two rows of 256 f16.
    assert_eq!(embed["bytes"], 2 * 256 * 2, "{embed}");
}
