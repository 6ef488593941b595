//! Helpers shared by the runtime's integration tests.

use sluice::{Buffer, Device, ResourceClass, Ticket};
use sluice_kernels::{groups_for, SpinPush, SPIN_U32};

/// A buffer of `n` u32 words.
pub fn words(d: &Device, name: &str, n: u32, class: ResourceClass) -> Buffer {
    d.create_buffer(name, n as u64 * 4, class).unwrap()
}

/// Submits a long-running kernel (about 0.1 s on lavapipe) and returns its ticket.
pub fn long_kernel(d: &Device) -> Ticket {
    let k = d.pipeline(&SPIN_U32).unwrap();
    let n = 8192;
    let src = words(d, "spin.src", n, ResourceClass::Generic);
    let dst = words(d, "spin.dst", n, ResourceClass::TokenScratch);
    let mut enc = d.encoder().unwrap();
    enc.dispatch(
        &k,
        [groups_for(n, 64), 1, 1],
        &[src.slice(..), dst.slice(..)],
        &SpinPush { iters: 60_000, n },
    )
    .unwrap();
    enc.submit().unwrap()
}
