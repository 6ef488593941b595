//! Element access on cooperative matrices (build.rs `coop_element_fixup`), where the device
//! has f16 matrix units (the H100): `coop_element_probe` reads which element of a 16 x 16
//! matrix each invocation of a subgroup holds, for uses A and B (f16) and the f32
//! accumulator, and builds a use-B matrix element by element in registers; the test
//! checks that every element is held exactly once per use, that the built matrix
//! multiplies exactly as the values it was given (identity times it), and prints the
//! mapping (run with `--nocapture`). Elsewhere (lavapipe, CI) the kernel must be refused
//! by name before any pipeline exists.

use sluice::{Device, Error};
use sluice_kernels::{
    cmd_b_element, cmd_layout_self_test, coop_element_probe_run, COOP_ELEMENT_PROBE,
};

#[test]
fn coop_matrix_elements_map_one_to_one_and_build_in_registers() {
    let d = Device::new(sluice::Options::default()).expect("a Vulkan device");
    if !d.info().coopmat_f16_16x16 {
        match d.pipeline(&COOP_ELEMENT_PROBE) {
            Err(Error::MissingFeature { missing, .. }) => {
                assert!(missing.contains(COOP_ELEMENT_PROBE.name), "{missing}")
            }
            Err(e) => panic!("expected MissingFeature, got {e}"),
            Ok(_) => panic!("{}: the probe must be refused", d.info().name),
        }
        eprintln!(
            "{}: no cooperative matrices; the refusal is checked",
            d.info().name
        );
        assert!(!cmd_layout_self_test(&d).unwrap());
        return;
    }
    // I (16 r + c) then V: distinct values exact in f16 (multiples of 1/8, |v| < 64).
    let (src, out) = coop_element_probe_run(&d).unwrap();
    for (u, name) in ["A (f16)", "B (f16)", "C (f32)"].iter().enumerate() {
        let len = out[768 + u];
        assert_eq!(len, 8.0, "{name}: elements per invocation");
        let mut seen = vec![0u32; 256];
        let mut lines = Vec::new();
        for lane in 0..32 {
            let els: Vec<usize> = (0..8)
                .map(|i| out[u * 256 + lane * 8 + i])
                .map(|v| {
                    assert!((0.0..256.0).contains(&v) && v.fract() == 0.0, "{name}: {v}");
                    v as usize
                })
                .collect();
            for &e in &els {
                seen[e] += 1;
            }
            if lane < 8 {
                let rc: Vec<String> = els
                    .iter()
                    .map(|e| format!("{},{}", e / 16, e % 16))
                    .collect();
                lines.push(format!("  lane {lane:>2}: {}", rc.join(" ")));
            }
        }
        assert!(
            seen.iter().all(|&n| n == 1),
            "{name}: not one to one: {seen:?}"
        );
        eprintln!(
            "{name}: element i of lane l at (row, col), lanes 0-7:\n{}",
            lines.join("\n")
        );
    }
    let want = &src[256..];
    let got = &out[800..1056];
    assert_eq!(
        got, want,
        "identity times the matrix built element by element"
    );
    // The batched f16 head's kernel runs only where the map is the one it assumes.
    let b_map_known = (0..32u32).all(|l| {
        (0..8u32).all(|i| {
            let (r, c) = cmd_b_element(l, i);
            out[256 + (l * 8 + i) as usize] == (16 * r + c) as f32
        })
    });
    let runs_cmd = cmd_layout_self_test(&d).unwrap();
    eprintln!("the use-B map is matvec_batch_cmd_f16's: {b_map_known}; its self-test: {runs_cmd}");
    assert_eq!(runs_cmd, b_map_known);
}
