//! The validation canary: a dispatch whose write is declared as a read gets no barrier
//! before its reader, and synchronization validation must report the hazard. If this
//! test fails, validation is not watching and every "zero messages" assertion is void.

use sluice::testing::test_device;
use sluice::{BindingAccess, KernelDesc, ResourceClass};
use sluice_kernels::{groups_for, AffinePush, AFFINE_U32};

#[test]
fn undeclared_write_is_reported_as_read_after_write() {
    let d = test_device();
    // Same shader, but binding 1 (really written) is declared as read.
    static LYING: KernelDesc = KernelDesc {
        bindings: &[BindingAccess::Read, BindingAccess::Read],
        ..AFFINE_U32
    };
    let honest = d.pipeline(&AFFINE_U32).unwrap();
    let lying = d.pipeline(&LYING).unwrap();
    let n = 256;
    let a = d
        .create_buffer("a", n as u64 * 4, ResourceClass::Generic)
        .unwrap();
    let b = d
        .create_buffer("b", n as u64 * 4, ResourceClass::Generic)
        .unwrap();
    let c = d
        .create_buffer("c", n as u64 * 4, ResourceClass::Generic)
        .unwrap();
    a.write(0, &vec![1u32; n as usize]).unwrap();
    let p = AffinePush { mul: 2, add: 1, n };
    let mut enc = d.encoder().unwrap();
    enc.dispatch(
        &lying,
        [groups_for(n, 64), 1, 1],
        &[a.slice(..), b.slice(..)],
        &p,
    )
    .unwrap();
    enc.dispatch(
        &honest,
        [groups_for(n, 64), 1, 1],
        &[b.slice(..), c.slice(..)],
        &p,
    )
    .unwrap();
    assert_eq!(
        enc.counters().barriers,
        0,
        "the lie must hide the dependency from the tracker"
    );
    enc.submit().unwrap().wait().unwrap();
    let messages = d.take_validation_messages();
    assert!(
        messages
            .iter()
            .any(|m| m.id.contains("READ-AFTER-WRITE") || m.text.contains("READ_AFTER_WRITE")),
        "sync validation did not report the planted hazard; got {messages:#?}"
    );
}

#[test]
fn honest_declaration_of_the_same_work_is_clean() {
    let d = test_device();
    let k = d.pipeline(&AFFINE_U32).unwrap();
    let n = 256;
    let a = d
        .create_buffer("a", n as u64 * 4, ResourceClass::Generic)
        .unwrap();
    let b = d
        .create_buffer("b", n as u64 * 4, ResourceClass::Generic)
        .unwrap();
    let c = d
        .create_buffer("c", n as u64 * 4, ResourceClass::Generic)
        .unwrap();
    a.write(0, &vec![1u32; n as usize]).unwrap();
    let p = AffinePush { mul: 2, add: 1, n };
    let mut enc = d.encoder().unwrap();
    enc.dispatch(
        &k,
        [groups_for(n, 64), 1, 1],
        &[a.slice(..), b.slice(..)],
        &p,
    )
    .unwrap();
    enc.dispatch(
        &k,
        [groups_for(n, 64), 1, 1],
        &[b.slice(..), c.slice(..)],
        &p,
    )
    .unwrap();
    assert_eq!(enc.counters().barriers, 1);
    enc.submit().unwrap().wait().unwrap();
    assert_eq!(c.read::<u32>(0, 1).unwrap()[0], 2 * (2 + 1) + 1);
    sluice::testing::assert_no_validation_messages(&d);
}
