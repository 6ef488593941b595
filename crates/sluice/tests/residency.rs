//! Residency changes are staged per allocation, applied once per submit boundary, and
//! held back while a tool (here: the validation layer itself) is attached.

use sluice::testing::{test_device, ValidationGuard};
use sluice::ResourceClass;

#[test]
fn priorities_are_batched_per_submit_and_held_back_while_a_tool_is_attached() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let start = d.residency();
    let buffers: Vec<_> = (0..50)
        .map(|i| {
            let class = if i % 2 == 0 {
                ResourceClass::ReadOnlyWeight
            } else {
                ResourceClass::AppendOnlyKv
            };
            d.create_buffer(&format!("w{i}"), 4096, class).unwrap()
        })
        .collect();
    let staged = d.residency();
    assert_eq!(
        staged.staged,
        start.staged + 50,
        "one staged change per allocation"
    );
    assert_eq!(
        staged.commits, start.commits,
        "nothing applied at allocation time"
    );

    // The validation layer counts as an attached tool.
    d.encoder().unwrap().submit().unwrap().wait().unwrap();
    let held = d.residency();
    assert!(
        held.tool_attached,
        "the validation layer should be listed as a tool"
    );
    assert_eq!(held.applied, start.applied);
    assert!(held.held_back > start.held_back);
    assert_eq!(held.staged, staged.staged);

    // The tool goes away: the next submit applies everything in one batch.
    d.ignore_attached_tools();
    d.encoder().unwrap().submit().unwrap().wait().unwrap();
    let applied = d.residency();
    assert_eq!(applied.staged, 0);
    assert_eq!(applied.applied, start.applied + staged.staged);
    assert_eq!(
        applied.commits,
        start.commits + 1,
        "one commit for the whole batch"
    );
    // Nothing staged: further submits commit nothing.
    d.encoder().unwrap().submit().unwrap().wait().unwrap();
    assert_eq!(d.residency().commits, applied.commits);
    drop(buffers);
}
