//! Device teardown: after the last `Device` handle goes, no sluice thread is left inside
//! the driver (a thread still destroying the device while the process exits crashed a
//! test binary at exit). Its own binary, so no other test's threads are counted.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use sluice::testing::{test_device, ValidationGuard};

mod common;
use common::long_kernel;

/// This process's threads named `sluice-waiter` (Linux: /proc/self/task/*/comm).
fn waiter_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "sluice-waiter")
        .count()
}

struct Flag(AtomicBool);
impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn dropping_the_device_ends_its_waiter_thread() {
    let d = test_device();
    let guard = ValidationGuard::new(&d);
    let mut ticket = long_kernel(&d);
    // A pending poll starts the waiter thread.
    let flag = Arc::new(Flag(false.into()));
    let waker = Waker::from(flag.clone());
    let first = Pin::new(&mut ticket).poll(&mut Context::from_waker(&waker));
    assert!(
        first.is_pending(),
        "the spin kernel ended before the first poll"
    );
    // The new thread names itself once it runs.
    let named = std::time::Instant::now();
    while waiter_threads() == 0 && named.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(waiter_threads(), 1, "a pending poll starts one waiter");
    // The waiter wakes the task once the kernel is done.
    while !flag.0.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(matches!(
        Pin::new(&mut ticket).poll(&mut Context::from_waker(&waker)),
        Poll::Ready(Ok(()))
    ));
    drop(guard);
    drop(ticket);
    // The idle waiter would sleep on for up to 200 ms; the last handle ends it now.
    drop(d);
    assert_eq!(waiter_threads(), 0, "the waiter thread outlived its device");
}
