//! `sluice profile` writes a per-op table whose floor column is the op's weight bytes over
//! the measured read bandwidth.

use std::process::Command;

/// `sluice profile --model synthetic:tiny-256 -n 2 EXTRA...`: the contents of `files` in
/// its output directory (removed afterwards), of one run.
fn profile_files(tag: &str, extra: &[&str], files: &[&str]) -> Vec<String> {
    let out = std::env::temp_dir().join(format!("sluice-profile-{tag}-{}", std::process::id()));
    let o = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["profile", "--model", "synthetic:tiny-256", "-n", "2"])
        .args(extra)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run sluice");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let texts = files
        .iter()
        .map(|f| std::fs::read_to_string(out.join(f)).unwrap())
        .collect();
    let _ = std::fs::remove_dir_all(&out);
    texts
}

/// [`profile_files`] for one file.
fn profile(tag: &str, extra: &[&str], file: &str) -> String {
    profile_files(tag, extra, &[file]).remove(0)
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

/// `layers.md` has a row per layer the trace names, each layer's total the sum of its
/// dispatches' times in the trace.
#[test]
fn profile_writes_a_row_per_layer() {
    let files = profile_files("layers", &[], &["layers.md", "trace.json"]);
    let md = &files[0];
    let trace: serde_json::Value = serde_json::from_str(&files[1]).unwrap();
    // GPU µs per layer from the trace's dispatch spans ("op L<n>").
    let mut want: Vec<(usize, f64)> = Vec::new();
    for e in trace["traceEvents"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap_or("");
        let Some(layer) = name
            .split(' ')
            .find_map(|w| w.strip_prefix('L'))
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let us = e["dur"].as_f64().unwrap();
        match want.iter_mut().find(|(l, _)| *l == layer) {
            Some(w) => w.1 += us,
            None => want.push((layer, us)),
        }
    }
    want.sort_by_key(|w| w.0);
    let rows: Vec<Vec<&str>> = md
        .lines()
        .filter(|l| l.starts_with("| ") && l.as_bytes().get(2).is_some_and(u8::is_ascii_digit))
        .map(|l| l.split('|').map(str::trim).collect())
        .collect();
    assert!(want.len() >= 2, "{md}");
    assert_eq!(rows.len(), want.len(), "{md}");
    for (row, (layer, us)) in rows.iter().zip(&want) {
        assert_eq!(row[1], layer.to_string(), "{md}");
        // The total column is the third from the end ("", kernels, total, ...).
        let total: f64 = row[row.len() - 3].parse().unwrap();
        assert!(
            (total - us).abs() < 0.1 + us * 1e-3,
            "layer {layer}: {total} vs {us}\n{md}"
        );
    }
}
