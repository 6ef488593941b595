//! Async waits: [`Ticket`] is a `Future`. One waiter thread per device parks on the
//! timeline semaphore for the smallest awaited value and wakes every task whose value has
//! been reached; tasks never spin. The thread starts on the first pending `.await`, holds
//! only a weak reference to the device while idle, and ends when the device goes. Dropping
//! the last [`crate::Device`] handle stops and joins it ([`Waiter::stop`]), so the device is
//! never destroyed on the waiter thread and no waiter thread is inside the driver when the
//! process exits.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::device::DeviceShared;
use crate::error::Result;
use crate::queue::Ticket;

/// How long the waiter parks per round before re-reading the list (new, smaller values
/// may have been registered meanwhile).
const PARK: Duration = Duration::from_millis(2);
/// How long an idle waiter sleeps before checking whether its device still exists.
const IDLE: Duration = Duration::from_millis(200);

#[derive(Default)]
struct State {
    waiting: Vec<(u64, Waker)>,
    running: bool,
    /// Set by [`Waiter::stop`]: the thread wakes every task and ends.
    stop: bool,
    /// The running thread, for [`Waiter::stop`] to join.
    thread: Option<JoinHandle<()>>,
}

/// The per-device registry of pending async waits.
#[derive(Default)]
pub(crate) struct Waiter {
    state: Mutex<State>,
    wake: Condvar,
}

impl Waiter {
    fn register(self: &Arc<Self>, device: &Arc<DeviceShared>, value: u64, waker: Waker) {
        let mut s = self.state.lock().expect("waiter poisoned");
        if let Some(entry) = s
            .waiting
            .iter_mut()
            .find(|(v, w)| *v == value && w.will_wake(&waker))
        {
            entry.1 = waker;
        } else {
            s.waiting.push((value, waker));
        }
        if !s.running {
            s.running = true;
            s.stop = false;
            let me = self.clone();
            let weak = Arc::downgrade(device);
            // A thread that ended by itself left its handle here; dropping it detaches
            // a thread that has nothing left to do.
            s.thread = Some(
                std::thread::Builder::new()
                    .name("sluice-waiter".into())
                    .spawn(move || me.run(weak))
                    .expect("spawn the sluice waiter thread"),
            );
        }
        self.wake.notify_one();
    }

    /// Ends the waiter thread, if one runs, and waits until it has: called when the last
    /// `Device` handle goes, after the queue drained. Tasks still waiting are woken; their
    /// polls see their values reached (or re-register, starting a new thread, for work
    /// submitted later through an encoder that outlived the handle).
    pub(crate) fn stop(&self) {
        let thread = {
            let mut s = self.state.lock().expect("waiter poisoned");
            let Some(thread) = s.thread.take() else {
                return;
            };
            s.stop = true;
            thread
        };
        self.wake.notify_all();
        // The thread's loop checks `stop` at least every PARK; a panic in it already
        // reached every task as a poisoned lock, so its result adds nothing.
        let _ = thread.join();
        self.state.lock().expect("waiter poisoned").stop = false;
    }

    fn run(self: Arc<Self>, device: Weak<DeviceShared>) {
        loop {
            let min = {
                let mut s = self.state.lock().expect("waiter poisoned");
                if s.waiting.is_empty() && !s.stop {
                    let (guard, _) = self.wake.wait_timeout(s, IDLE).expect("waiter poisoned");
                    s = guard;
                }
                if s.stop {
                    let woken: Vec<_> = s.waiting.drain(..).collect();
                    s.running = false;
                    drop(s);
                    woken.into_iter().for_each(|(_, w)| w.wake());
                    return;
                }
                if s.waiting.is_empty() {
                    if device.strong_count() == 0 {
                        s.running = false;
                        return;
                    }
                    continue;
                }
                s.waiting.iter().map(|(v, _)| *v).min().expect("non-empty")
            };
            let Some(dev) = device.upgrade() else {
                // The device is gone: wake everyone so their polls see it.
                let mut s = self.state.lock().expect("waiter poisoned");
                s.waiting.drain(..).for_each(|(_, w)| w.wake());
                s.running = false;
                return;
            };
            let reached = dev.queue.park(&dev, min, PARK);
            let mut s = self.state.lock().expect("waiter poisoned");
            match reached {
                Ok(now) => {
                    let (ready, rest): (Vec<_>, Vec<_>) =
                        s.waiting.drain(..).partition(|(v, _)| *v <= now);
                    s.waiting = rest;
                    drop(s);
                    ready.into_iter().for_each(|(_, w)| w.wake());
                }
                // Device lost and the like: wake all; their polls return the error.
                Err(_) => s.waiting.drain(..).for_each(|(_, w)| w.wake()),
            }
        }
    }
}

impl Future for Ticket {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let dev = &self.device;
        match dev.queue.reached(dev, self.value) {
            Ok(true) => return Poll::Ready(Ok(())),
            Err(e) => return Poll::Ready(Err(e)),
            Ok(false) => {}
        }
        dev.waiter.register(dev, self.value, cx.waker().clone());
        // Re-check: the value may have been reached between the poll and the registration.
        match dev.queue.reached(dev, self.value) {
            Ok(true) => Poll::Ready(Ok(())),
            Err(e) => Poll::Ready(Err(e)),
            Ok(false) => Poll::Pending,
        }
    }
}
