//! The occupancy probes count their workgroups in and out (lavapipe, validation and
//! synchronization validation on); `kernel_bench occ` reads them on a GPU.

use sluice::testing::{test_device, ValidationGuard};
use sluice::ResourceClass;
use sluice_kernels::{OccupancyPush, OCCUPANCY_PROBES};

#[test]
fn occupancy_probes_count_workgroups_in_and_out() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let limit = d.info().max_workgroup_memory_bytes;
    let occ = d
        .create_buffer("occ", 16, ResourceClass::TokenScratch)
        .unwrap();
    let groups = 12u32;
    let mut ran = 0;
    for (bytes, desc) in OCCUPANCY_PROBES {
        assert_eq!(desc.workgroup_memory_bytes, bytes, "{}", desc.name);
        let k = match d.pipeline(desc) {
            Ok(k) => k,
            // Over the device's limit: refused before a pipeline exists, never a panic.
            Err(e) => {
                assert!(bytes > limit, "{}: {e}", desc.name);
                continue;
            }
        };
        occ.write(0, &[0u32; 4]).unwrap();
        let mut enc = d.encoder().unwrap();
        let push = OccupancyPush { iters: 300, pad: 0 };
        enc.dispatch(&k, [groups, 1, 1], &[occ.slice(..)], &push)
            .unwrap();
        enc.submit().unwrap().wait().unwrap();
        let got: Vec<u32> = occ.read(0, 3).unwrap();
        assert_eq!(got[0], 0, "{}: every workgroup counted out", desc.name);
        assert!(
            (1..=groups).contains(&got[1]),
            "{}: at most {} at once of {groups}",
            desc.name,
            got[1]
        );
        ran += 1;
    }
    assert!(ran >= 5, "only {ran} probes ran");
}
