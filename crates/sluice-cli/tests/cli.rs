//! The `sluice` binary end to end, on whatever Vulkan device exists, validation on.

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

#[test]
fn demo_json_auto_elides_barriers_and_matches_serial_and_cpu() {
    let (ok, stdout, stderr) = sluice(&["demo", "--json", "--validate"]);
    assert!(ok, "demo failed: {stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("demo prints JSON");
    assert_eq!(v["results_match_cpu"], true);
    assert_eq!(v["auto_equals_serial"], true);
    assert_eq!(v["auto"]["dispatches"], 100);
    assert_eq!(v["serial"]["dispatches"], 100);
    assert_eq!(v["serial"]["barriers"], 99);
    // 5 interleaved chains of 10 steps: one barrier per step boundary.
    assert_eq!(v["auto"]["barriers"], 9);
}

#[test]
fn info_json_describes_the_device() {
    let (ok, stdout, stderr) = sluice(&["info", "--json", "--validate"]);
    assert!(ok, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(v["name"].as_str().is_some_and(|n| !n.is_empty()));
    assert!(v["subgroup_size"].as_u64().unwrap() >= 1);
    assert!(v["heaps"].as_array().is_some_and(|h| !h.is_empty()));
}

#[test]
fn bad_usage_is_a_clear_error() {
    let (ok, _, stderr) = sluice(&["info", "--jsn"]);
    assert!(!ok);
    assert!(stderr.contains("unexpected argument '--jsn'"), "{stderr}");
    assert!(
        stderr.contains("similar argument exists: '--json'"),
        "{stderr}"
    );
    let (ok, _, stderr) = sluice(&["info", "--adapter", "no-such-gpu-xyz"]);
    assert!(!ok);
    assert!(
        stderr.contains("no Vulkan device found matching"),
        "{stderr}"
    );
    let (ok, _, stderr) = sluice(&["frobnicate"]);
    assert!(!ok);
    assert!(stderr.contains("unrecognized subcommand"), "{stderr}");
}
