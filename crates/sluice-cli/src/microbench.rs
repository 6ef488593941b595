//! `sluice microbench dispatch|sync`: per-dispatch GPU cost and host wait costs.

use std::time::Instant;

use serde::Serialize;
use sluice::{Device, ResourceClass, TimestampQueries};
use sluice_kernels::{AffinePush, AFFINE_U32};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// GPU time per dispatch of tiny dispatches, dependent and independent.
#[derive(Serialize)]
pub struct DispatchReport {
    /// Device name.
    pub device: String,
    /// Dispatches per run.
    pub dispatches: u32,
    /// Runs (the figures are medians).
    pub runs: u32,
    /// GPU µs per dispatch in a dependent chain (barrier between each).
    pub chain_gpu_us_per_dispatch: f64,
    /// GPU µs per dispatch when all are independent (no barrier).
    pub independent_gpu_us_per_dispatch: f64,
    /// Barriers recorded in the chain run.
    pub chain_barriers: u64,
    /// Barriers recorded in the independent run.
    pub independent_barriers: u64,
    /// CPU µs per dispatch spent recording.
    pub record_cpu_us_per_dispatch: f64,
}

/// Two timestamps around `count` tiny dispatches: the whole run divided by `count`.
pub fn dispatch(device: &Device, count: u32, runs: u32) -> sluice::Result<DispatchReport> {
    let k = device.pipeline(&AFFINE_U32)?;
    let n = 64u32; // one workgroup
    let stride = 256u64.max(device.info().storage_offset_alignment);
    let a = device.create_buffer("bench.a", stride, ResourceClass::TokenScratch)?;
    let b = device.create_buffer("bench.b", stride, ResourceClass::TokenScratch)?;
    let src = device.create_buffer("bench.src", stride, ResourceClass::Generic)?;
    let fan = device.create_buffer(
        "bench.fan",
        stride * count as u64,
        ResourceClass::TokenScratch,
    )?;
    src.write(0, &vec![1u32; n as usize])?;
    let q = TimestampQueries::new(device, 2)?;
    let p = AffinePush { mul: 3, add: 1, n };
    let (mut chain, mut indep, mut rec) = (Vec::new(), Vec::new(), Vec::new());
    let (mut chain_barriers, mut indep_barriers) = (0, 0);
    for _ in 0..runs {
        for dependent in [true, false] {
            let mut enc = device.encoder()?;
            let t = Instant::now();
            enc.write_timestamp(&q, 0)?;
            for i in 0..count {
                if dependent {
                    let (from, to) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
                    enc.dispatch(
                        &k,
                        [1, 1, 1],
                        &[from.slice(0..n as u64 * 4), to.slice(0..n as u64 * 4)],
                        &p,
                    )?;
                } else {
                    let out = fan.slice(i as u64 * stride..i as u64 * stride + n as u64 * 4);
                    enc.dispatch(&k, [1, 1, 1], &[src.slice(0..n as u64 * 4), out], &p)?;
                }
            }
            enc.write_timestamp(&q, 1)?;
            rec.push(t.elapsed().as_secs_f64() * 1e6 / count as f64);
            let barriers = enc.counters().barriers;
            enc.submit()?.wait()?;
            let ts = q.read_ns()?;
            let per = (ts[1] - ts[0]) / 1000.0 / count as f64;
            if dependent {
                chain.push(per);
                chain_barriers = barriers;
            } else {
                indep.push(per);
                indep_barriers = barriers;
            }
        }
    }
    Ok(DispatchReport {
        device: device.info().name.clone(),
        dispatches: count,
        runs,
        chain_gpu_us_per_dispatch: median(chain),
        independent_gpu_us_per_dispatch: median(indep),
        chain_barriers,
        independent_barriers: indep_barriers,
        record_cpu_us_per_dispatch: median(rec),
    })
}

/// Host-side wait costs.
#[derive(Serialize)]
pub struct SyncReport {
    /// Device name.
    pub device: String,
    /// Median ns of `Ticket::wait` on a completed ticket (over 1e6 calls in batches of 1000).
    pub completed_wait_ns: f64,
    /// Median ns of `Device::synchronize` on an idle queue.
    pub synchronize_idle_ns: f64,
    /// Median µs of submit + wait of one tiny dispatch.
    pub round_trip_us: f64,
    /// Median µs of submit + `.await` of one tiny dispatch (waiter thread wakes the task).
    pub async_round_trip_us: f64,
    /// Median µs to read 4 KiB of a ReadOnlyWeight buffer while a long kernel runs (on a
    /// resizable-BAR GPU these are uncached reads over PCIe: slow, but they never wait).
    pub weight_read_during_work_us: f64,
    /// Host waits those weight reads caused (expected 0).
    pub weight_read_host_waits: u64,
    /// Whether the long kernel was still running after every weight read.
    pub weight_read_overlapped_work: bool,
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// Measures wait costs.
pub fn sync(device: &Device) -> sluice::Result<SyncReport> {
    let k = device.pipeline(&AFFINE_U32)?;
    let a = device.create_buffer("bench.a", 256, ResourceClass::Generic)?;
    let b = device.create_buffer("bench.b", 256, ResourceClass::Generic)?;
    let p = AffinePush {
        mul: 3,
        add: 1,
        n: 64,
    };
    let mut round = Vec::new();
    let mut last = None;
    for _ in 0..200 {
        let t = Instant::now();
        let mut enc = device.encoder()?;
        enc.dispatch(&k, [1, 1, 1], &[a.slice(..), b.slice(..)], &p)?;
        let ticket = enc.submit()?;
        ticket.wait()?;
        round.push(t.elapsed().as_secs_f64() * 1e6);
        last = Some(ticket);
    }
    let ticket = last.expect("200 submits");
    let mut async_round = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        let mut enc = device.encoder()?;
        enc.dispatch(&k, [1, 1, 1], &[a.slice(..), b.slice(..)], &p)?;
        block_on(enc.submit()?)?;
        async_round.push(t.elapsed().as_secs_f64() * 1e6);
    }
    // Weight reads while a long kernel runs on other buffers.
    let weight = device.create_buffer("bench.weight", 4096, ResourceClass::ReadOnlyWeight)?;
    weight.write(0, &vec![7u32; 1024])?;
    device.synchronize()?;
    let spin = device.pipeline(&sluice_kernels::SPIN_U32)?;
    // Long enough to outlast the reads: ~10 ms on an H100, ~0.3 s on lavapipe.
    let n = if device.info().device_type == "cpu" {
        1 << 14
    } else {
        1 << 20
    };
    let s_src = device.create_buffer("bench.spin.src", n as u64 * 4, ResourceClass::Generic)?;
    let s_dst =
        device.create_buffer("bench.spin.dst", n as u64 * 4, ResourceClass::TokenScratch)?;
    let mut enc = device.encoder()?;
    enc.dispatch(
        &spin,
        [n / 64, 1, 1],
        &[s_src.slice(..), s_dst.slice(..)],
        &sluice_kernels::SpinPush { iters: 60_000, n },
    )?;
    let busy = enc.submit()?;
    let waits_before = device.counters().host_waits;
    let mut reads = Vec::new();
    let mut out = vec![0u8; 4096];
    for _ in 0..10 {
        let t = Instant::now();
        weight.read_into(0, &mut out)?;
        reads.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let overlapped = !busy.is_done()?;
    let weight_waits = device.counters().host_waits - waits_before;
    busy.wait()?;
    let mut completed = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t = Instant::now();
        for _ in 0..1000 {
            ticket.wait()?;
        }
        completed.push(t.elapsed().as_nanos() as f64 / 1000.0);
    }
    let mut idle = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t = Instant::now();
        device.synchronize()?;
        idle.push(t.elapsed().as_nanos() as f64);
    }
    Ok(SyncReport {
        device: device.info().name.clone(),
        completed_wait_ns: median(completed),
        synchronize_idle_ns: median(idle),
        round_trip_us: median(round),
        async_round_trip_us: median(async_round),
        weight_read_during_work_us: median(reads),
        weight_read_host_waits: weight_waits,
        weight_read_overlapped_work: overlapped,
    })
}
