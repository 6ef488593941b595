//! Int8 matrix units through naga's 8x8 marker types rewritten by build.rs
//! (docs/decisions/0008-int8-matrix-units.md), where the device has them (the H100): the
//! probe kernel's int8 products must equal the CPU's integer product; the products scaled
//! per row and column in registers (`mma_i8_scale_probe`: converted and divided by an f16
//! outer product) must be exact for power-of-two scales; the batched matvec on them
//! (`matvec_batch_i8mm`) must match the integer-dot CPU model (`quant_dp::matvec_dp_cpu` on
//! the GPU's own quantized activations, NMSE <= 1e-5: its scale factors are f16, as the
//! staged f16 kernels' weights) with each token's rows bit for bit the same alone.
//! Elsewhere (lavapipe, CI) the kernels must be refused by name before any pipeline exists.

use sluice::{Buffer, Device, Error, KernelDesc, KernelFeature, ResourceClass};
use sluice_kernels::quant_dp::{matvec_dp_cpu, XQ8};
use sluice_kernels::*;

mod common;
use common::*;

/// The device with matrix units where there is one (validation layers predate them).
fn device() -> Device {
    Device::new(sluice::Options::default()).expect("a Vulkan device")
}

/// Random int8 values, packed four per word (byte j of word i = element 4 i + j).
fn int8s(rng: &mut Rng, n: usize) -> (Vec<i8>, Vec<u32>) {
    let v: Vec<i8> = (0..n).map(|_| (rng.next_u32() >> 24) as u8 as i8).collect();
    let words = v
        .chunks(4)
        .map(|c| u32::from_le_bytes([c[0] as u8, c[1] as u8, c[2] as u8, c[3] as u8]))
        .collect();
    (v, words)
}

/// C = A . B in wrapping i32 arithmetic: A `m x k`, B given as its `n x k` transpose;
/// only the first `kk` of K, the product taken `times` times.
fn reference(a: &[i8], bt: &[i8], m: usize, n: usize, k: usize, kk: usize, times: i32) -> Vec<i32> {
    let mut c = vec![0i32; m * n];
    for i in 0..m {
        for j in 0..n {
            let s: i32 = (0..kk)
                .map(|p| a[i * k + p] as i32 * bt[j * k + p] as i32)
                .sum();
            c[i * n + j] = s.wrapping_mul(times);
        }
    }
    c
}

/// One dispatch of a probe kernel over A, B^T (and, for `mma_i8_scale_probe`, the
/// scales): its C as floats (`mma_i8_probe`: s32 bits).
fn probe(
    d: &Device,
    kernel: &KernelDesc,
    a: &[u32],
    bt: &[u32],
    scales: Option<&[f32]>,
    p: MmaI8ProbePush,
) -> Vec<f32> {
    let k = d.pipeline(kernel).unwrap();
    let ab = u32_buffer(d, "a", a, ResourceClass::ReadOnlyWeight);
    let bb = u32_buffer(d, "bt", bt, ResourceClass::ReadOnlyWeight);
    let sb = scales.map(|v| f32_buffer(d, "scales", v, ResourceClass::ReadOnlyWeight));
    let n = (p.m * p.n) as usize;
    let cb = f32_buffer(d, "c", &vec![f32::NAN; n], ResourceClass::TokenScratch);
    let mut bind = vec![ab.slice(..), bb.slice(..)];
    bind.extend(sb.as_ref().map(|b| b.slice(..)));
    bind.push(cb.slice(..));
    let mut enc = d.encoder().unwrap();
    enc.dispatch(&k, [p.m / 16, p.n / 16, 1], &bind, &p)
        .unwrap();
    enc.submit().unwrap().wait().unwrap();
    cb.read(0, n).unwrap()
}

/// `mma_i8_probe`'s C as int32.
fn run(d: &Device, a: &[u32], bt: &[u32], p: MmaI8ProbePush) -> Vec<i32> {
    let got = probe(d, &MMA_I8_PROBE, a, bt, None, p);
    got.iter().map(|v| v.to_bits() as i32).collect()
}

#[test]
fn int8_matrix_units_multiply_exactly_or_are_refused() {
    let d = device();
    let info = d.info().clone();
    let needs = MMA_I8_PROBE.features().unwrap();
    assert!(
        needs.contains(&KernelFeature::Int8) && needs.contains(&KernelFeature::CooperativeMatrix),
        "the rewritten module must declare Int8 and CooperativeMatrixKHR: {needs:?}"
    );
    if !info.coopmat_s8_16x16x32 {
        let has_shape = info
            .coopmat_shapes
            .iter()
            .any(|s| s == "16x16x32 s8*s8+s32->s32 subgroup");
        assert!(
            !has_shape || !info.coopmat_f16_16x16,
            "{} lists 16x16x32 s8 tiles and matrix units but int8 ones are off",
            info.name
        );
        assert_refused(&d, &MMA_I8_PROBE);
        assert_refused(&d, &MMA_I8_SCALE_PROBE);
        eprintln!(
            "{}: no int8 matrix units; the refusal is checked",
            info.name
        );
        return;
    }
    let mut rng = Rng::new(8);
    for (m, n, k) in [(16usize, 16usize, 32usize), (48, 32, 96), (32, 64, 256)] {
        let (a, aw) = int8s(&mut rng, m * k);
        let (bt, bw) = int8s(&mut rng, n * k);
        let p = MmaI8ProbePush {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            mode: 0,
            reps: 0,
        };
        let got = run(&d, &aw, &bw, p);
        assert_eq!(got, reference(&a, &bt, m, n, k, k, 1), "{m}x{n}x{k}");
        // Register-resident repeats: four chains of 3 products of the first 32 of K.
        let got = run(
            &d,
            &aw,
            &bw,
            MmaI8ProbePush {
                mode: 1,
                reps: 3,
                ..p
            },
        );
        assert_eq!(
            got,
            reference(&a, &bt, m, n, k, 32, 12),
            "{m}x{n}x{k} repeated"
        );
        // Scaled in registers by powers of two (exact): I[r][t] sa[r] sb[t].
        let pow2 = |i: usize| 2f32.powi((i % 7) as i32 - 3);
        let sa: Vec<f32> = (0..m).map(pow2).collect();
        let sb: Vec<f32> = (0..n).map(|j| pow2(j + 2)).collect();
        let want: Vec<f32> = reference(&a, &bt, m, n, k, k, 1)
            .iter()
            .enumerate()
            .map(|(e, &v)| v as f32 * sa[e / n] * sb[e % n])
            .collect();
        let scales: Vec<f32> = sa.iter().chain(&sb).copied().collect();
        let got = probe(&d, &MMA_I8_SCALE_PROBE, &aw, &bw, Some(&scales), p);
        assert_eq!(bits(&got), bits(&want), "{m}x{n}x{k} scaled");
    }
}

/// Int8 operations of one speed-mode dispatch: 4 reps products of 16 x 16 x 32 per tile.
fn int8_ops(m: usize, n: usize, reps: u32) -> f64 {
    2.0 * (m * n * 32) as f64 * 4.0 * reps as f64
}

/// Speed of the int8 matrix units from naga (register-resident products, and with the
/// operands reloaded from shared memory before each product; H100 only):
/// `cargo test --release -p sluice-kernels --test int8_matrix -- --ignored --nocapture`.
#[test]
#[ignore]
fn int8_matrix_speed_probe() {
    let d = device();
    if !d.info().coopmat_s8_16x16x32 {
        eprintln!("no int8 matrix units");
        return;
    }
    let mut rng = Rng::new(9);
    // 132 x 64 tiles of 16 x 16 (8448 subgroups), K = 32 for the repeats.
    let (m, n, k) = (132 * 16usize, 64 * 16usize, 32usize);
    let (_, aw) = int8s(&mut rng, m * k);
    let (_, bw) = int8s(&mut rng, n * k);
    let kern = d.pipeline(&MMA_I8_PROBE).unwrap();
    let ab = u32_buffer(&d, "a", &aw, ResourceClass::ReadOnlyWeight);
    let bb = u32_buffer(&d, "bt", &bw, ResourceClass::ReadOnlyWeight);
    let cb = f32_buffer(&d, "c", &vec![0.0; m * n], ResourceClass::TokenScratch);
    let modes = [
        (1, "registers"),
        (2, "loads from shared, 16-byte elements"),
        (3, "loads from shared, 4-byte elements"),
        (4, "loads from shared (16-byte) + a store"),
    ];
    for (mode, what) in modes {
        let reps = 1024u32;
        let p = MmaI8ProbePush {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            mode,
            reps,
        };
        let bind = [ab.slice(..), bb.slice(..), cb.slice(..)];
        let best = best_dispatch_secs(&d, &kern, [p.m / 16, p.n / 16, 1], &bind, &p, 10);
        let ops = int8_ops(m, n, reps);
        println!(
            "int8 16x16x32, {} tiles, reps {reps}, {what}: {:.1} us per dispatch, {:.0} TOPS",
            m * n / 256,
            best * 1e6,
            ops / best / 1e12
        );
    }
    // Each product also scaled in registers (an f16 product for R, the conversion, the
    // division, the sum): the epilogue a matvec would need per 32 columns.
    let kern = d.pipeline(&MMA_I8_SCALE_PROBE).unwrap();
    let sc = f32_buffer(
        &d,
        "scales",
        &vec![1.0; m + n],
        ResourceClass::ReadOnlyWeight,
    );
    let reps = 1024u32;
    let p = MmaI8ProbePush {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        mode: 1,
        reps,
    };
    let bind = [ab.slice(..), bb.slice(..), sc.slice(..), cb.slice(..)];
    let best = best_dispatch_secs(&d, &kern, [p.m / 16, p.n / 16, 1], &bind, &p, 10);
    println!(
        "int8 16x16x32, {} tiles, reps {reps}, scaled in registers: {:.1} us per dispatch, {:.0} TOPS",
        m * n / 256,
        best * 1e6,
        int8_ops(m, n, reps) / best / 1e12
    );
}

/// On a device without int8 matrix units: `kernel` refused, by name (for the missing
/// feature, or first for its shared memory where the device allows less, as lavapipe's
/// 32 KiB).
fn assert_refused(d: &Device, kernel: &KernelDesc) {
    match d.pipeline(kernel) {
        Err(Error::MissingFeature { missing, .. }) => {
            assert!(missing.contains(kernel.name), "{missing}")
        }
        Err(Error::InvalidUse(m)) if m.contains("workgroup memory") => {
            assert!(m.contains(kernel.name), "{m}")
        }
        Err(e) => panic!("{}: expected MissingFeature, got {e}", kernel.name),
        Ok(_) => panic!("{}: {} must be refused", d.info().name, kernel.name),
    }
}

/// The GPU's quantized activations (act_q8 words and block entries of one token) as the
/// CPU model's input.
fn xq8(words: &[u32], blocks: &[u32]) -> XQ8 {
    let q = words
        .iter()
        .flat_map(|w| w.to_le_bytes().map(|b| b as i8))
        .collect();
    let f: Vec<f32> = blocks.iter().map(|&b| f32::from_bits(b)).collect();
    XQ8 {
        q,
        d: f.chunks_exact(4).map(|e| e[0]).collect(),
        sum16: f.chunks_exact(4).flat_map(|e| [e[1], e[2]]).collect(),
    }
}

fn qbuf(d: &Device, dt: WeightDtype, rows: usize, cols: usize, file: &[u8]) -> Buffer {
    let gpu = to_gpu_layout(dt, rows, cols, file);
    let b = d
        .create_buffer("w", gpu.len() as u64, ResourceClass::ReadOnlyWeight)
        .unwrap();
    b.write_bytes(0, &gpu).unwrap();
    b
}

#[test]
fn matvec_batch_i8mm_matches_int_reference_and_each_token_alone() {
    let d = device();
    let dt = WeightDtype::Q4K;
    if !d.info().coopmat_s8_16x16x32 {
        assert_refused(&d, matvec_batch_i8mm(dt, false).unwrap());
        assert_refused(&d, matvec_batch_i8mm(dt, true).unwrap());
        eprintln!(
            "{}: no int8 matrix units; the refusal is checked",
            d.info().name
        );
        return;
    }
    let mut rng = Rng::new(31);
    // A partial row group (200 rows), several K chunks, long rows; tokens: one, a
    // partial tile, past one token group of 64.
    for (rows, cols) in [(64usize, 256usize), (200, 512), (96, 2560)] {
        let fg = quantize(dt, rows, cols, &rng.vec(rows * cols, 0.3));
        let fu = quantize(dt, rows, cols, &rng.vec(rows * cols, 0.3));
        let (g, u) = (qbuf(&d, dt, rows, cols, &fg), qbuf(&d, dt, rows, cols, &fu));
        for tokens in [1usize, 17, 70] {
            let what = format!("{} {rows}x{cols} x{tokens}", dt.name());
            let x = rng.vec(tokens * cols, 2.0);
            let (words, blocks) = act_q8_rows(&d, &x, cols as u32, tokens as u32);
            let (qs, ds) = act_q8_strides(cols as u32);
            let (qs, ds) = (qs as usize, 4 * ds as usize);
            let (mut plain, mut gated) = (vec![], vec![]);
            for t in 0..tokens {
                let q = xq8(&words[t * qs..][..qs], &blocks[t * ds..][..ds]);
                let (yg, yu) = (
                    matvec_dp_cpu(dt, rows, cols, &fg, &q),
                    matvec_dp_cpu(dt, rows, cols, &fu, &q),
                );
                plain.extend(&yg);
                gated.extend(yg.iter().zip(&yu).map(|(a, b)| a / (1.0 + (-a).exp()) * b));
            }
            let y0 = rng.vec(tokens * rows, 1.0);
            let run = |silu: bool, t0: usize, n: usize, accumulate: bool| -> Vec<f32> {
                let (push, groups) =
                    MatvecBatchI8mmPush::new(dt, rows as u32, cols as u32, n as u32);
                let push = MatvecBatchI8mmPush {
                    accumulate: accumulate as u32,
                    ..push
                };
                // Whole tiles of 16 tokens (the rows past n read, never used: garbage).
                let mut padded = words[t0 * qs..][..n * qs].to_vec();
                padded.resize(n.next_multiple_of(16) * qs, 0x8181_8181);
                let xq = u32_buffer(&d, "xq", &padded, ResourceClass::TokenScratch);
                let xd = u32_buffer(
                    &d,
                    "xd",
                    &blocks[t0 * ds..][..n * ds],
                    ResourceClass::TokenScratch,
                );
                let init = if accumulate {
                    y0[t0 * rows..][..n * rows].to_vec()
                } else {
                    vec![f32::NAN; n * rows]
                };
                let y = f32_buffer(&d, "y", &init, ResourceClass::TokenScratch);
                let k = d.pipeline(matvec_batch_i8mm(dt, silu).unwrap()).unwrap();
                let mut bind = vec![g.slice(..)];
                if silu {
                    bind.push(u.slice(..));
                }
                bind.extend([xq.slice(..), xd.slice(..), y.slice(..)]);
                let mut enc = d.encoder().unwrap();
                enc.dispatch(&k, groups, &bind, &push).unwrap();
                enc.submit().unwrap().wait().unwrap();
                y.read(0, n * rows).unwrap()
            };
            let got = run(false, 0, tokens, false);
            assert_nmse(&format!("{what} plain"), &got, &plain, 1e-5);
            let got = run(false, 0, tokens, true);
            let want: Vec<f32> = plain.iter().zip(&y0).map(|(a, b)| a + b).collect();
            assert_nmse(&format!("{what} accumulate"), &got, &want, 1e-5);
            let got_s = run(true, 0, tokens, false);
            assert_nmse(&format!("{what} gated"), &got_s, &gated, 1e-5);
            // The last token alone: its rows bit for bit.
            let t = tokens - 1;
            for (silu, batched) in [(false, &run(false, 0, tokens, false)), (true, &got_s)] {
                let alone = run(silu, t, 1, false);
                assert_eq!(
                    bits(&alone),
                    bits(&batched[t * rows..]),
                    "{what} (gated {silu}): token {t} alone differs from batched"
                );
            }
        }
    }
}
