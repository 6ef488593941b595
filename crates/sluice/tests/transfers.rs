//! Host access, transfers, lifetimes and waits (DESIGN rules 2-4), on the zero-copy path
//! and the staging path, with synchronization validation on.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use sluice::testing::{test_device, test_device_with, ValidationGuard};
use sluice::{Buffer, Device, Options, ResourceClass, Ticket};
use sluice_kernels::{affine_u32_cpu, groups_for, AffinePush, SpinPush, AFFINE_U32, SPIN_U32};

mod common;
use common::{long_kernel, words};

fn block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

#[test]
fn reading_a_weight_never_waits_for_unrelated_work() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let weight = words(&d, "w", 1024, ResourceClass::ReadOnlyWeight);
    let values: Vec<u32> = (0..1024).collect();
    weight.write(0, &values).unwrap();
    d.synchronize().unwrap();
    let waits = d.counters().host_waits;
    let busy = long_kernel(&d);
    let read: Vec<u32> = weight.read(0, 1024).unwrap();
    assert!(
        !busy.is_done().unwrap(),
        "the long kernel finished before the read: the test proves nothing"
    );
    assert_eq!(read, values);
    assert_eq!(d.counters().host_waits, waits, "reading a weight waited");
    busy.wait().unwrap();
}

/// A host write into a buffer that queued work still reads must not change what it sees.
fn write_after_read(force_staging: bool) {
    let d = test_device_with(Options {
        force_staging,
        ..Options::default()
    });
    let _guard = ValidationGuard::new(&d);
    let k = d.pipeline(&AFFINE_U32).unwrap();
    let spin = d.pipeline(&SPIN_U32).unwrap();
    let n = 512u32;
    let input = words(&d, "in", n, ResourceClass::Generic);
    let out = words(&d, "out", n, ResourceClass::PersistentOutput);
    let s_src = words(&d, "spin.src", 8192, ResourceClass::Generic);
    let s_dst = words(&d, "spin.dst", 8192, ResourceClass::TokenScratch);
    assert_eq!(input.is_host_visible(), !force_staging);
    let old: Vec<u32> = (0..n).collect();
    input.write(0, &old).unwrap();
    let p = AffinePush { mul: 7, add: 3, n };
    let mut enc = d.encoder().unwrap();
    enc.dispatch(
        &spin,
        [128, 1, 1],
        &[s_src.slice(..), s_dst.slice(..)],
        &SpinPush {
            iters: 60_000,
            n: 8192,
        },
    )
    .unwrap();
    enc.dispatch(
        &k,
        [groups_for(n, 64), 1, 1],
        &[input.slice(..), out.slice(..)],
        &p,
    )
    .unwrap();
    let t = enc.submit().unwrap();
    let new: Vec<u32> = vec![0xdead_beef; n as usize];
    let waits = d.counters().host_waits;
    input.write(0, &new).unwrap(); // while `t` may still be reading `input`
    if force_staging {
        assert_eq!(
            d.counters().host_waits,
            waits,
            "the staged write should be ordered, not waited for"
        );
    }
    t.wait().unwrap();
    let got: Vec<u32> = out.read(0, n as usize).unwrap();
    assert_eq!(
        got,
        old.iter()
            .map(|&x| affine_u32_cpu(x, &p))
            .collect::<Vec<_>>()
    );
    assert_eq!(input.read::<u32>(0, n as usize).unwrap(), new);
}

#[test]
fn host_write_after_gpu_read_zero_copy() {
    write_after_read(false);
}

#[test]
fn host_write_after_gpu_read_staging() {
    write_after_read(true);
}

#[test]
fn staging_round_trip_and_consecutive_submits() {
    let d = test_device_with(Options {
        force_staging: true,
        ..Options::default()
    });
    let _guard = ValidationGuard::new(&d);
    let k = d.pipeline(&AFFINE_U32).unwrap();
    let n = 333u32;
    let a = words(&d, "a", n, ResourceClass::TokenScratch);
    let b = words(&d, "b", n, ResourceClass::TokenScratch);
    assert!(!a.is_host_visible());
    let mut want: Vec<u32> = (0..n).map(|i| i * 3 + 1).collect();
    a.write(0, &want).unwrap();
    assert_eq!(a.read::<u32>(0, n as usize).unwrap(), want);
    for i in 0..6u32 {
        let p = AffinePush { mul: 5, add: i, n };
        let (from, to) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let mut enc = d.encoder().unwrap();
        enc.dispatch(
            &k,
            [groups_for(n, 64), 1, 1],
            &[from.slice(..), to.slice(..)],
            &p,
        )
        .unwrap();
        enc.submit().unwrap(); // no wait between submits
        want = want.iter().map(|&x| affine_u32_cpu(x, &p)).collect();
    }
    assert_eq!(a.read::<u32>(0, n as usize).unwrap(), want);
}

#[test]
fn deferred_writes_land_before_the_next_submit() {
    for force_staging in [false, true] {
        let d = test_device_with(Options {
            force_staging,
            ..Options::default()
        });
        let _guard = ValidationGuard::new(&d);
        let k = d.pipeline(&AFFINE_U32).unwrap();
        let n = 100u32;
        let input = words(&d, "in", n, ResourceClass::Generic);
        let out = words(&d, "out", n, ResourceClass::PersistentOutput);
        // On an empty queue, a flush with nothing pending is a no-op.
        assert!(d.flush_deferred_writes().unwrap().is_none());
        let p = AffinePush { mul: 2, add: 1, n };
        for round in 0..3u32 {
            let data: Vec<u32> = (0..n).map(|i| i + 1000 * round).collect();
            let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
            let waits = d.counters().host_waits;
            d.write_before_next_submit(&input, 0, &bytes).unwrap();
            assert_eq!(d.counters().host_waits, waits);
            let mut enc = d.encoder().unwrap();
            enc.dispatch(
                &k,
                [groups_for(n, 64), 1, 1],
                &[input.slice(..), out.slice(..)],
                &p,
            )
            .unwrap();
            let readback = enc.read_after(out.slice(..)).unwrap();
            enc.submit().unwrap();
            let got: Vec<u32> = readback
                .wait()
                .unwrap()
                .chunks(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(
                got,
                data.iter()
                    .map(|&x| affine_u32_cpu(x, &p))
                    .collect::<Vec<_>>(),
                "round {round}"
            );
        }
    }
}

#[test]
fn readbacks_survive_later_work_and_unsubmitted_ones_error() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let k = d.pipeline(&AFFINE_U32).unwrap();
    let n = 64u32;
    let a = words(&d, "a", n, ResourceClass::Generic);
    let b = words(&d, "b", n, ResourceClass::PersistentOutput);
    a.write(0, &vec![1u32; n as usize]).unwrap();
    let mut enc = d.encoder().unwrap();
    enc.dispatch(
        &k,
        [1, 1, 1],
        &[a.slice(..), b.slice(..)],
        &AffinePush { mul: 1, add: 41, n },
    )
    .unwrap();
    let first = enc.read_after(b.slice(0..16)).unwrap();
    enc.submit().unwrap();
    // Later submits overwrite `b`; the readback holds the value at its point in the stream.
    for add in [100, 200] {
        let mut enc = d.encoder().unwrap();
        enc.dispatch(
            &k,
            [1, 1, 1],
            &[a.slice(..), b.slice(..)],
            &AffinePush { mul: 1, add, n },
        )
        .unwrap();
        enc.submit().unwrap();
    }
    let got = first.wait().unwrap();
    assert_eq!(
        got,
        [42u32; 4]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<_>>()
    );
    let mut enc = d.encoder().unwrap();
    let orphan = enc.read_after(b.slice(..)).unwrap();
    drop(enc);
    assert!(orphan.wait().is_err());
}

#[test]
fn tickets_are_futures() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    // Completed and never-submitted tickets are ready at once.
    block_on(d.last_ticket()).unwrap();
    let t = long_kernel(&d);
    let waits = d.counters().host_waits;
    // Several tasks on several threads await the same ticket.
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let t = t.clone();
            std::thread::spawn(move || block_on(t))
        })
        .collect();
    block_on(t.clone()).unwrap();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    assert!(t.is_done().unwrap());
    assert_eq!(
        d.counters().host_waits,
        waits,
        "awaiting must not count as (or do) a blocking host wait"
    );
}

#[test]
fn runtime_types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Device>();
    check::<Buffer>();
    check::<Ticket>();
    check::<sluice::Pipeline>();
    check::<sluice::Readback>();
    fn send<T: Send>() {}
    send::<sluice::Encoder>();
}

#[test]
fn eight_threads_submit_and_read_back() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let k = d.pipeline(&AFFINE_U32).unwrap();
    std::thread::scope(|s| {
        for t in 0..8u32 {
            let (d, k) = (d.clone(), k.clone());
            s.spawn(move || {
                let n = 96u32;
                let a = words(&d, "a", n, ResourceClass::Generic);
                let b = words(&d, "b", n, ResourceClass::PersistentOutput);
                for i in 0..200u32 {
                    let data: Vec<u32> = (0..n).map(|j| j ^ (t << 16) ^ i).collect();
                    a.write(0, &data).unwrap();
                    let p = AffinePush {
                        mul: t + 1,
                        add: i,
                        n,
                    };
                    let mut enc = d.encoder().unwrap();
                    enc.dispatch(
                        &k,
                        [groups_for(n, 64), 1, 1],
                        &[a.slice(..), b.slice(..)],
                        &p,
                    )
                    .unwrap();
                    enc.submit().unwrap();
                    let got: Vec<u32> = b.read(0, n as usize).unwrap();
                    assert_eq!(
                        got,
                        data.iter()
                            .map(|&x| affine_u32_cpu(x, &p))
                            .collect::<Vec<_>>()
                    );
                }
            });
        }
    });
    assert!(d.counters().submits >= 1600);
}
