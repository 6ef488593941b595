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

/// `info --kernels FILTER`: the driver's compile statistics of the matching kernels as
/// JSON where the device reports them (NVIDIA), else a clear error naming the extension
/// (lavapipe); a filter matching no kernel is an error either way.
#[test]
fn info_kernels_reports_statistics_or_says_why_not() {
    let (ok, stdout, stderr) =
        sluice(&["info", "--kernels", "matvec_q4_k", "--json", "--validate"]);
    if ok {
        let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let rows = v.as_array().unwrap();
        assert!(rows.len() >= 2, "{stdout}");
        for r in rows {
            assert!(r["kernel"].as_str().unwrap().contains("matvec_q4_k"));
            let stats = r["statistics"].as_array().unwrap();
            assert!(!stats.is_empty() || r["error"].is_string(), "{r}");
        }
        let (ok, _, stderr) = sluice(&["info", "--kernels", "no_such_kernel"]);
        assert!(!ok);
        assert!(stderr.contains("no kernel name contains"), "{stderr}");
    } else {
        assert!(
            stderr.contains("does not report kernel statistics")
                && stderr.contains("VK_KHR_pipeline_executable_properties"),
            "{stderr}"
        );
    }
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
