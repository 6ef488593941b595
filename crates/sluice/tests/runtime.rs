//! Runtime core on whatever Vulkan device exists (lavapipe in CI), with synchronization
//! validation on: results vs CPU, barrier counts vs the dataflow, errors as values.

use sluice::testing::{
    assert_no_validation_messages, test_device, test_device_with, ValidationGuard,
};
use sluice::{BarrierMode, Buffer, Device, Error, Options, ResourceClass};
use sluice_kernels::{affine_u32_cpu, groups_for, AffinePush, SpinPush, AFFINE_U32, SPIN_U32};

const N: u32 = 1000; // not a multiple of the workgroup size

fn words(device: &Device, name: &str, n: u32, class: ResourceClass) -> Buffer {
    device.create_buffer(name, n as u64 * 4, class).unwrap()
}

fn input(n: u32) -> Vec<u32> {
    (0..n)
        .map(|i| i.wrapping_mul(2654435761) ^ 0x5bd1e995)
        .collect()
}

#[test]
fn device_info_is_sane() {
    let d = test_device();
    let info = d.info();
    assert!(!info.name.is_empty());
    assert!(info.subgroup_size >= 1);
    assert!(info.timeline_semaphores);
    assert!(!info.heaps.is_empty());
    assert!(info.api_version.starts_with("1."));
    assert_no_validation_messages(&d);
}

#[test]
fn dispatch_matches_cpu() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let k = d.pipeline(&AFFINE_U32).unwrap();
    let src = words(&d, "src", N, ResourceClass::Generic);
    let dst = words(&d, "dst", N, ResourceClass::PersistentOutput);
    let data = input(N);
    src.write(0, &data).unwrap();
    let p = AffinePush {
        mul: 3,
        add: 7,
        n: N,
    };
    let mut enc = d.encoder().unwrap();
    enc.dispatch(
        &k,
        [groups_for(N, 64), 1, 1],
        &[src.slice(..), dst.slice(..)],
        &p,
    )
    .unwrap();
    enc.submit().unwrap().wait().unwrap();
    let out: Vec<u32> = dst.read(0, N as usize).unwrap();
    let want: Vec<u32> = data.iter().map(|&x| affine_u32_cpu(x, &p)).collect();
    assert_eq!(out, want);
}

/// Records `chain` dependent dispatches (ping-pong a <-> b) and `independent` dispatches
/// reading `src` and writing disjoint slices of `wide`; returns outputs and counters.
fn chain_and_fan(
    mode: BarrierMode,
    chain: u32,
    independent: u32,
) -> (Vec<u32>, Vec<u32>, sluice::Counters) {
    let d = test_device_with(Options {
        barriers: mode,
        ..Options::default()
    });
    let _guard = ValidationGuard::new(&d);
    let k = d.pipeline(&AFFINE_U32).unwrap();
    let n = 256u32;
    let a = words(&d, "a", n, ResourceClass::TokenScratch);
    let b = words(&d, "b", n, ResourceClass::TokenScratch);
    let src = words(&d, "src", n, ResourceClass::Generic);
    let wide = words(&d, "wide", n * independent, ResourceClass::PersistentOutput);
    a.write(0, &input(n)).unwrap();
    src.write(0, &input(n)).unwrap();
    let mut enc = d.encoder().unwrap();
    for i in 0..independent {
        let p = AffinePush {
            mul: i + 2,
            add: i,
            n,
        };
        let out = wide.slice(i as u64 * n as u64 * 4..(i + 1) as u64 * n as u64 * 4);
        enc.dispatch(&k, [groups_for(n, 64), 1, 1], &[src.slice(..), out], &p)
            .unwrap();
    }
    for i in 0..chain {
        let p = AffinePush { mul: 5, add: i, n };
        let (from, to) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        enc.dispatch(
            &k,
            [groups_for(n, 64), 1, 1],
            &[from.slice(..), to.slice(..)],
            &p,
        )
        .unwrap();
    }
    let counters = enc.counters();
    enc.submit().unwrap().wait().unwrap();
    let last = if chain % 2 == 1 { &b } else { &a };
    (
        last.read(0, n as usize).unwrap(),
        wide.read(0, (n * independent) as usize).unwrap(),
        counters,
    )
}

#[test]
fn auto_barriers_follow_dataflow_and_match_serial_bit_for_bit() {
    let (chain, independent) = (20, 20);
    let (auto_chain, auto_wide, auto) = chain_and_fan(BarrierMode::Auto, chain, independent);
    let (serial_chain, serial_wide, serial) =
        chain_and_fan(BarrierMode::Serial, chain, independent);
    assert_eq!(auto_chain, serial_chain);
    assert_eq!(auto_wide, serial_wide);
    // CPU reference.
    let n = 256;
    let mut x = input(n);
    for i in 0..chain {
        x = x
            .iter()
            .map(|&v| affine_u32_cpu(v, &AffinePush { mul: 5, add: i, n }))
            .collect();
    }
    assert_eq!(auto_chain, x);
    let mut wide = Vec::new();
    for i in 0..independent {
        wide.extend(input(n).iter().map(|&v| {
            affine_u32_cpu(
                v,
                &AffinePush {
                    mul: i + 2,
                    add: i,
                    n,
                },
            )
        }));
    }
    assert_eq!(auto_wide, wide);
    // 40 ops: the fan of 20 is one group; the first chain link reads `a`, which the fan
    // does not touch, so it joins too; then 19 dependent links each need a barrier.
    // (Counted before submit: the trailing barrier that makes the submit's writes
    // visible is not in these numbers.)
    assert_eq!(auto.dispatches, 40);
    assert_eq!(auto.barriers, 19);
    assert_eq!(auto.barriers_elided, 39 - 19);
    assert_eq!(serial.barriers, 39);
    assert_eq!(serial.barriers_elided, 0);
}

#[test]
fn write_declared_on_a_weight_is_an_error() {
    let d = test_device();
    let k = d.pipeline(&AFFINE_U32).unwrap();
    let src = words(&d, "src", 64, ResourceClass::Generic);
    let weight = words(&d, "w", 64, ResourceClass::ReadOnlyWeight);
    weight.write(0, &input(64)).unwrap(); // the upload itself is allowed
    let mut enc = d.encoder().unwrap();
    let err = enc
        .dispatch(
            &k,
            [1, 1, 1],
            &[src.slice(..), weight.slice(..)],
            &AffinePush {
                mul: 1,
                add: 0,
                n: 64,
            },
        )
        .unwrap_err();
    assert!(
        matches!(err, Error::WriteToReadOnlyWeight { buffer, .. } if buffer == weight.id()),
        "{err}"
    );
    drop(enc);
    d.synchronize().unwrap();
    assert_no_validation_messages(&d);
}

#[test]
fn bad_dispatches_are_errors_not_panics() {
    let d = test_device();
    let k = d.pipeline(&AFFINE_U32).unwrap();
    let a = words(&d, "a", 64, ResourceClass::Generic);
    let mut enc = d.encoder().unwrap();
    let p = AffinePush {
        mul: 1,
        add: 0,
        n: 64,
    };
    assert!(matches!(
        enc.dispatch(&k, [1, 1, 1], &[a.slice(..)], &p),
        Err(Error::InvalidUse(_))
    ));
    assert!(matches!(
        enc.dispatch(&k, [1, 1, 1], &[a.slice(..), a.slice(0..512)], &p),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        enc.dispatch(&k, [0, 1, 1], &[a.slice(..), a.slice(..)], &p),
        Err(Error::InvalidUse(_))
    ));
    assert!(matches!(
        enc.dispatch(&k, [1, 1, 1], &[a.slice(..), a.slice(..)], &5u32),
        Err(Error::InvalidUse(_))
    ));
    assert!(matches!(
        a.read::<u32>(200, 64),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        d.create_buffer("empty", 0, ResourceClass::Generic),
        Err(Error::InvalidUse(_))
    ));
    // A binding past what the device binds at once (maxStorageBufferRange; lavapipe's is
    // 128 MiB, so the buffer is made only where the limit is that small).
    let max = d.info().max_storage_range;
    if max <= 256 << 20 {
        let big = d
            .create_buffer("big", max + 256, ResourceClass::Generic)
            .unwrap();
        match enc.dispatch(&k, [1, 1, 1], &[a.slice(..), big.slice(..)], &p) {
            Err(Error::InvalidUse(m)) => assert!(m.contains("maxStorageBufferRange"), "{m}"),
            other => panic!("expected InvalidUse, got {other:?}"),
        }
        enc.dispatch(&k, [1, 1, 1], &[a.slice(..), big.slice(0..max)], &p)
            .unwrap();
    }
    drop(enc);
    assert_no_validation_messages(&d);
    // `Options::max_binding` lowers the limit on any device, and the refusal says so.
    let small = test_device_with(Options {
        max_binding: Some(192),
        ..Options::default()
    });
    assert_eq!(small.info().max_storage_range, 192);
    let k = small.pipeline(&AFFINE_U32).unwrap();
    let a = words(&small, "a", 48, ResourceClass::Generic);
    let b = words(&small, "b", 64, ResourceClass::Generic);
    let mut enc = small.encoder().unwrap();
    let p = AffinePush {
        mul: 1,
        add: 0,
        n: 48,
    };
    match enc.dispatch(&k, [1, 1, 1], &[a.slice(..), b.slice(..)], &p) {
        Err(Error::InvalidUse(m)) => {
            assert!(
                m.contains("256 bytes") && m.contains("the max_binding option"),
                "{m}"
            )
        }
        other => panic!("expected InvalidUse, got {other:?}"),
    }
    enc.dispatch(&k, [1, 1, 1], &[a.slice(..), b.slice(0..192)], &p)
        .unwrap();
    drop(enc);
    assert_no_validation_messages(&small);
}

#[test]
fn tickets_fast_path_spin_and_timeout() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    // Nothing submitted: last ticket is done, wait returns at once without a host wait.
    let t0 = d.last_ticket();
    assert!(t0.is_done().unwrap());
    t0.wait().unwrap();
    d.synchronize().unwrap();
    assert_eq!(d.counters().host_waits, 0);

    let k = d.pipeline(&SPIN_U32).unwrap();
    let n = 4096;
    let src = words(&d, "src", n, ResourceClass::Generic);
    let dst = words(&d, "dst", n, ResourceClass::PersistentOutput);
    src.write(0, &input(n)).unwrap();
    let mut enc = d.encoder().unwrap();
    // lavapipe (llvmpipe) stops any loop after 65535 iterations; stay below that.
    let push = SpinPush { iters: 60_000, n };
    enc.dispatch(
        &k,
        [groups_for(n, 64), 1, 1],
        &[src.slice(..), dst.slice(..)],
        &push,
    )
    .unwrap();
    let t = enc.submit().unwrap();
    // A slow kernel: a 1 µs wait times out with the numbers that explain it.
    match t.wait_timeout(std::time::Duration::from_micros(1)) {
        Err(Error::Timeout { value, reached, .. }) => {
            assert_eq!(value, t.value());
            assert!(reached < value);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    t.wait().unwrap();
    assert!(t.is_done().unwrap());
    let waits = d.counters().host_waits;
    assert!(waits >= 1);
    // Completed: fast path, no new host wait.
    for _ in 0..1000 {
        t.wait().unwrap();
    }
    assert_eq!(d.counters().host_waits, waits);
    let out: Vec<u32> = dst.read(0, 8).unwrap();
    let want: Vec<u32> = input(8)
        .iter()
        .map(|&x| sluice_kernels::spin_u32_cpu(x, push.iters))
        .collect();
    assert_eq!(out, want);
}

#[test]
fn buffers_dropped_before_completion_live_until_their_ticket() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let before = d.allocated_bytes();
    let k = d.pipeline(&AFFINE_U32).unwrap();
    let out = words(&d, "out", N, ResourceClass::PersistentOutput);
    let after_out = d.allocated_bytes();
    let p = AffinePush {
        mul: 9,
        add: 1,
        n: N,
    };
    let mut enc = d.encoder().unwrap();
    {
        let scratch = words(&d, "scratch", N, ResourceClass::TokenScratch);
        scratch.write(0, &input(N)).unwrap();
        enc.dispatch(
            &k,
            [groups_for(N, 64), 1, 1],
            &[scratch.slice(..), out.slice(..)],
            &p,
        )
        .unwrap();
        assert!(d.allocated_bytes() > after_out);
    } // scratch handle dropped while recorded, before submit
    let t = enc.submit().unwrap();
    t.wait().unwrap();
    let got: Vec<u32> = out.read(0, N as usize).unwrap();
    assert_eq!(
        got,
        input(N)
            .iter()
            .map(|&x| affine_u32_cpu(x, &p))
            .collect::<Vec<_>>()
    );
    // The next submit reclaims completed work; the scratch memory is gone.
    d.encoder().unwrap().submit().unwrap().wait().unwrap();
    assert_eq!(d.allocated_bytes(), after_out);
    drop(out);
    assert_eq!(d.allocated_bytes(), before);
}
