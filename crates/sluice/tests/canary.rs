//! The validation canary: a dispatch whose write is declared as a read gets no barrier
//! before its reader, and synchronization validation must report the hazard. If this
//! test fails, validation is not watching and every "zero messages" assertion is void.

use std::sync::Arc;

use sluice::testing::test_device;
use sluice::{BindingAccess, Buffer, Device, KernelDesc, Pipeline, ResourceClass};
use sluice_kernels::{groups_for, AffinePush, AFFINE_U32};

const N: u32 = 256;

/// Records `first` (a -> b) then the honest kernel (b -> c) in one encoder; returns the
/// barriers the tracker placed and buffer c after the submit completed.
fn writer_then_reader(d: &Device, first: &Arc<Pipeline>) -> (u64, Buffer) {
    let honest = d.pipeline(&AFFINE_U32).unwrap();
    let buf = |name: &str| {
        d.create_buffer(name, N as u64 * 4, ResourceClass::Generic)
            .unwrap()
    };
    let (a, b, c) = (buf("a"), buf("b"), buf("c"));
    a.write(0, &vec![1u32; N as usize]).unwrap();
    let p = AffinePush {
        mul: 2,
        add: 1,
        n: N,
    };
    let groups = [groups_for(N, 64), 1, 1];
    let mut enc = d.encoder().unwrap();
    enc.dispatch(first, groups, &[a.slice(..), b.slice(..)], &p)
        .unwrap();
    enc.dispatch(&honest, groups, &[b.slice(..), c.slice(..)], &p)
        .unwrap();
    let barriers = enc.counters().barriers;
    enc.submit().unwrap().wait().unwrap();
    (barriers, c)
}

#[test]
fn undeclared_write_is_reported_as_read_after_write() {
    let d = test_device();
    // Same shader, but binding 1 (really written) is declared as read.
    static LYING: KernelDesc = KernelDesc {
        bindings: &[BindingAccess::Read, BindingAccess::Read],
        ..AFFINE_U32
    };
    let (barriers, _) = writer_then_reader(&d, &d.pipeline(&LYING).unwrap());
    assert_eq!(
        barriers, 0,
        "the lie must hide the dependency from the tracker"
    );
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
    let (barriers, c) = writer_then_reader(&d, &d.pipeline(&AFFINE_U32).unwrap());
    assert_eq!(barriers, 1);
    assert_eq!(c.read::<u32>(0, 1).unwrap()[0], 2 * (2 + 1) + 1);
    sluice::testing::assert_no_validation_messages(&d);
}
