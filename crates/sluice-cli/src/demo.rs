//! `sluice demo`: 100 small dispatches, half in dependent chains, half independent, run
//! in Auto and in Serial barrier mode and checked against the CPU.

use serde::Serialize;
use sluice::{BarrierMode, Buffer, Device, ResourceClass};
use sluice_kernels::{affine_u32_cpu, groups_for, AffinePush, AFFINE_U32};

/// Elements per dispatch.
const N: u32 = 1000;
/// Dependent chains, each `CHAIN_LEN` long, interleaved with the independent dispatches.
const CHAINS: u32 = 5;
const CHAIN_LEN: u32 = 10;
/// Independent dispatches (each writes its own slice).
const INDEPENDENT: u32 = 50;

/// Counters of one mode.
#[derive(Serialize)]
pub struct ModeReport {
    /// Dispatches recorded.
    pub dispatches: u64,
    /// Barriers between dispatches (the submit's trailing barrier not included).
    pub barriers: u64,
    /// Dispatch boundaries without a barrier.
    pub barriers_elided: u64,
}

/// What `sluice demo --json` prints.
#[derive(Serialize)]
pub struct DemoReport {
    /// Device name.
    pub device: String,
    /// Auto mode.
    pub auto: ModeReport,
    /// Serial mode.
    pub serial: ModeReport,
    /// Auto's outputs equal the CPU reference.
    pub results_match_cpu: bool,
    /// Auto's outputs equal Serial's bit for bit.
    pub auto_equals_serial: bool,
}

fn input(n: u32, seed: u32) -> Vec<u32> {
    (0..n)
        .map(|i| (i ^ seed).wrapping_mul(2654435761).wrapping_add(seed))
        .collect()
}

fn push(chain: u32, step: u32) -> AffinePush {
    AffinePush {
        mul: 3 + 2 * chain,
        add: step * 7 + chain,
        n: N,
    }
}

/// Runs the workload in `mode`; returns all output words and the counters.
fn run_mode(device: &Device, mode: BarrierMode) -> sluice::Result<(Vec<u32>, ModeReport)> {
    let k = device.pipeline(&AFFINE_U32)?;
    let bytes = N as u64 * 4;
    let src = device.create_buffer("demo.src", bytes, ResourceClass::Generic)?;
    src.write(0, &input(N, 0))?;
    let fan = device.create_buffer(
        "demo.fan",
        bytes * INDEPENDENT as u64,
        ResourceClass::PersistentOutput,
    )?;
    let mut chains: Vec<[Buffer; 2]> = Vec::new();
    for c in 0..CHAINS {
        let a = device.create_buffer("demo.chain.a", bytes, ResourceClass::PersistentOutput)?;
        let b = device.create_buffer("demo.chain.b", bytes, ResourceClass::PersistentOutput)?;
        a.write(0, &input(N, c + 1))?;
        chains.push([a, b]);
    }
    let mut enc = device.encoder()?;
    enc.set_barrier_mode(mode);
    let groups = [groups_for(N, AFFINE_U32.workgroup_size[0]), 1, 1];
    // Interleave: one step of every chain, then five independent dispatches.
    let mut fan_next = 0;
    for step in 0..CHAIN_LEN {
        for (c, pair) in chains.iter().enumerate() {
            let (from, to) = (&pair[(step % 2) as usize], &pair[(1 - step % 2) as usize]);
            enc.dispatch(
                &k,
                groups,
                &[from.slice(..), to.slice(..)],
                &push(c as u32, step),
            )?;
        }
        for _ in 0..INDEPENDENT / CHAIN_LEN {
            let out = fan.slice(fan_next as u64 * bytes..(fan_next + 1) as u64 * bytes);
            enc.dispatch(
                &k,
                groups,
                &[src.slice(..), out],
                &push(100 + fan_next, fan_next),
            )?;
            fan_next += 1;
        }
    }
    let c = enc.counters();
    enc.submit()?.wait()?;
    let mut out = fan.read::<u32>(0, (N * INDEPENDENT) as usize)?;
    for pair in &chains {
        out.extend(pair[(CHAIN_LEN % 2) as usize].read::<u32>(0, N as usize)?);
    }
    Ok((
        out,
        ModeReport {
            dispatches: c.dispatches,
            barriers: c.barriers,
            barriers_elided: c.barriers_elided,
        },
    ))
}

fn cpu_reference() -> Vec<u32> {
    let mut out = Vec::new();
    for i in 0..INDEPENDENT {
        out.extend(
            input(N, 0)
                .iter()
                .map(|&x| affine_u32_cpu(x, &push(100 + i, i))),
        );
    }
    for c in 0..CHAINS {
        let mut x = input(N, c + 1);
        for step in 0..CHAIN_LEN {
            x = x
                .iter()
                .map(|&v| affine_u32_cpu(v, &push(c, step)))
                .collect();
        }
        out.extend(x);
    }
    out
}

/// Runs the demo on `device`.
pub fn run(device: &Device) -> sluice::Result<DemoReport> {
    let (auto_out, auto) = run_mode(device, BarrierMode::Auto)?;
    let (serial_out, serial) = run_mode(device, BarrierMode::Serial)?;
    Ok(DemoReport {
        device: device.info().name.clone(),
        auto,
        serial,
        results_match_cpu: auto_out == cpu_reference(),
        auto_equals_serial: auto_out == serial_out,
    })
}
