//! The matmul family and the flash-attention prefill kernel against CPU references at
//! odd sizes (tokens 1, 3, 17, 64; rows and columns not multiples of the tiles), with
//! synchronization validation on. The cooperative-matrix kernels run where the device
//! has them (the H100); everywhere else the test checks that the selector falls back.
//!
//! Metric: NMSE = sum((gpu - ref)^2) / sum(ref^2), reference in f64 from the same
//! dtype-rounded weights. Bounds: 1e-6 for the f32 tiled kernels; the cooperative-matrix
//! kernels round x and weights to f16, so 1e-5 there (f16 has an 11-bit significand:
//! relative error per product ~5e-4, NMSE of a long dot product ~1e-7..1e-6).

use sluice::testing::{test_device, ValidationGuard};
use sluice::{Device, ResourceClass};
use sluice_kernels::*;

mod common;
use common::{assert_nmse as assert_close, *};

const NMSE_MAX: f64 = 1e-6;
const NMSE_MAX_CM: f64 = 1e-5;
const DTYPES: [WeightDtype; 3] = [WeightDtype::F16, WeightDtype::Bf16, WeightDtype::F32];

fn rounded(dtype: WeightDtype, w: &[f32]) -> Vec<f32> {
    w.iter().map(|&v| round_to(dtype, v)).collect()
}

/// One matmul dispatch of `variant` on random data; returns (gpu, reference).
#[allow(clippy::too_many_arguments)]
fn run_matmul(
    d: &Device,
    rng: &mut Rng,
    dt: WeightDtype,
    variant: MatmulVariant,
    coopmat: bool,
    tokens: u32,
    rows: u32,
    cols: u32,
    accumulate: bool,
) -> (Vec<f32>, Vec<f32>) {
    let (r, c) = (rows as usize, cols as usize);
    let mut p = MatmulPush::for_dtype(dt, rows, cols, tokens);
    // Strides larger than the minimum: the kernel must honour them.
    p.x_stride = cols.div_ceil(4) * 4 + 4;
    p.y_stride = rows + 3;
    p.accumulate = accumulate as u32;
    p.eps = 1e-5;
    let w = rng.vec(r * c, 1.0);
    let wb = rng.vec(r * c, 1.0);
    let nw = rng.vec(c, 1.5);
    let x = rng.vec(tokens as usize * p.x_stride as usize, 2.0);
    let y0 = rng.vec(tokens as usize * p.y_stride as usize, 1.0);
    // y starts as NaN where nothing is accumulated: overwritten outputs must not read it,
    // and the gaps between tokens' rows must stay NaN (nothing written there).
    let y_init: Vec<f32> = if accumulate && !variant.has_silu() {
        y0.clone()
    } else {
        vec![f32::NAN; y0.len()]
    };
    let k = d.pipeline(matmul(dt, variant, coopmat)).unwrap();
    let wbuf = weight_buffer(d, dt, r, c, &w);
    let wbbuf = weight_buffer(d, dt, r, c, &wb);
    let xbuf = f32_buffer(d, "x", &x, ResourceClass::TokenScratch);
    let nbuf = f32_buffer(d, "norm_w", &nw, ResourceClass::ReadOnlyWeight);
    let ybuf = f32_buffer(d, "y", &y_init, ResourceClass::TokenScratch);
    let slices = match variant {
        MatmulVariant::Plain => vec![wbuf.slice(..), xbuf.slice(..), ybuf.slice(..)],
        MatmulVariant::Norm => vec![
            wbuf.slice(..),
            xbuf.slice(..),
            nbuf.slice(..),
            ybuf.slice(..),
        ],
        MatmulVariant::Silu => vec![
            wbuf.slice(..),
            wbbuf.slice(..),
            xbuf.slice(..),
            ybuf.slice(..),
        ],
        MatmulVariant::SiluNorm => vec![
            wbuf.slice(..),
            wbbuf.slice(..),
            xbuf.slice(..),
            nbuf.slice(..),
            ybuf.slice(..),
        ],
    };
    let mut enc = d.encoder().unwrap();
    enc.dispatch(&k, matmul_groups(rows, tokens, coopmat), &slices, &p)
        .unwrap();
    enc.submit().unwrap().wait().unwrap();
    let got: Vec<f32> = ybuf.read(0, y0.len()).unwrap();

    // Reference from the dtype-rounded weights. The cooperative-matrix path also rounds x
    // (after the norm weight) and bf16/f32 weights to f16; its looser bound covers that.
    let exact = |v: &[f32]| {
        if dt.is_quantized() {
            dequantize(dt, r, c, &quantize(dt, r, c, v))
        } else {
            rounded(dt, v)
        }
    };
    let (wr, wbr) = (exact(&w), exact(&wb));
    let want = matmul_cpu(
        variant,
        &p,
        &wr,
        Some(&wbr),
        Some(&nw),
        &x,
        &y_init_or(&y0, &y_init),
    );
    // Compare only the written elements; the gaps must be untouched.
    let (mut g, mut wv) = (Vec::new(), Vec::new());
    for t in 0..tokens as usize {
        let row = t * p.y_stride as usize;
        g.extend_from_slice(&got[row..row + r]);
        wv.extend_from_slice(&want[row..row + r]);
        for i in row + r..row + p.y_stride as usize {
            assert_eq!(
                got[i].to_bits(),
                y_init[i].to_bits(),
                "gap element {i} written"
            );
        }
    }
    (g, wv)
}

fn y_init_or(y0: &[f32], y_init: &[f32]) -> Vec<f32> {
    if y_init.iter().all(|v| v.is_nan()) {
        vec![0.0; y0.len()]
    } else {
        y0.to_vec()
    }
}

const SHAPES: [(u32, u32, u32); 5] = [
    // (tokens, rows, cols): rows/cols not multiples of the tiles, cols not of 8.
    (1, 37, 100),
    (3, 70, 45),
    (17, 129, 77),
    (64, 65, 130),
    (3, 16, 8),
];

#[test]
fn tiled_matmul_matches_reference() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(11);
    for (tokens, rows, cols) in SHAPES {
        for dt in DTYPES {
            for variant in MatmulVariant::ALL {
                for accumulate in [false, true] {
                    if accumulate && variant.has_silu() {
                        continue;
                    }
                    let (got, want) = run_matmul(
                        &d, &mut rng, dt, variant, false, tokens, rows, cols, accumulate,
                    );
                    assert_close(
                        &format!("{variant:?} acc={accumulate} {dt:?} t{tokens} {rows}x{cols}"),
                        &got,
                        &want,
                        NMSE_MAX,
                    );
                }
            }
        }
    }
}

#[test]
fn tiled_matmul_decodes_block_formats() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(13);
    for dt in sluice_kernels::quant::QUANT_DTYPES {
        // Columns: whole blocks (256 for the K-quants), more than one K step of 32.
        let cols = (dt.block_elems() as u32).max(64) * 2;
        // One shape per format keeps this quick on lavapipe (the per-element decode makes
        // big shaders); the tiling itself is covered by tiled_matmul_matches_reference.
        for (tokens, rows) in [(1u32, 37u32), (17, 65)] {
            // Plain (first matrix) and SiluNorm (both matrices: the decode redirect to
            // w_b); the epilogues of the other variants are dtype-independent and covered
            // by tiled_matmul_matches_reference. Keeps lavapipe's cold compiles short.
            for variant in [MatmulVariant::Plain, MatmulVariant::SiluNorm] {
                let accumulate = variant == MatmulVariant::Plain;
                let (got, want) = run_matmul(
                    &d, &mut rng, dt, variant, false, tokens, rows, cols, accumulate,
                );
                assert_close(
                    &format!("{variant:?} acc={accumulate} {dt:?} t{tokens} {rows}x{cols}"),
                    &got,
                    &want,
                    NMSE_MAX,
                );
            }
        }
    }
}

#[test]
fn matmul_groups_cover_the_output() {
    assert_eq!(matmul_groups(65, 17, false), [2, 1, 1]);
    assert_eq!(matmul_groups(64, 64, false), [1, 1, 1]);
    assert_eq!(matmul_groups(1, 65, false), [1, 2, 1]);
    assert_eq!(matmul_groups(151936, 512, false), [2374, 8, 1]);
    assert_eq!(matmul_groups(129, 3, true), [2, 1, 1]);
    let p = MatmulPush::new(70, 45, 3);
    assert_eq!((p.stride8, p.x_stride, p.y_stride), (6, 48, 70));
}

/// A device for the cooperative-matrix tests: no validation layer (the Khronos layer
/// installed here, 1.3.239, predates VK_KHR_cooperative_matrix, and the GPU machine has
/// none).
fn coopmat_device() -> Device {
    Device::new(sluice::Options::default()).expect("a Vulkan device")
}

#[test]
fn coopmat_matmul_matches_reference() {
    let d = coopmat_device();
    let info = d.info();
    if !info.coopmat_f16_16x16 {
        // lavapipe (CI): no matrix units. The flag must then be explained by the device.
        let shape = info
            .coopmat_shapes
            .iter()
            .any(|s| s == "16x16x16 f16*f16+f32->f32 subgroup");
        assert!(
            !shape || info.subgroup_size != 32 || !info.shader_f16,
            "{} lists 16x16x16 f16 tiles with subgroups of 32 but coopmat is off",
            info.name
        );
        assert!(
            !coopmat_self_test(&d).unwrap(),
            "self-test without matrix units"
        );
        eprintln!(
            "{}: no cooperative matrices; only the selector is checked",
            info.name
        );
        assert_ne!(
            matmul(WeightDtype::F16, MatmulVariant::Plain, true).name,
            matmul(WeightDtype::F16, MatmulVariant::Plain, false).name
        );
        return;
    }
    let off = Device::new(sluice::Options {
        no_coopmat: true,
        ..Default::default()
    })
    .unwrap();
    assert!(!off.info().coopmat_f16_16x16, "no_coopmat must turn it off");
    drop(off);
    let self_test = coopmat_self_test(&d).unwrap();
    println!("coopmat self-test: {self_test}");
    let mut rng = Rng::new(12);
    let mut failures = Vec::new();
    if !self_test {
        failures.push("coopmat_self_test: the matrix path disagrees with the tiled one".into());
    }
    let shapes = [
        (1, 37, 100),
        (3, 70, 45),
        (17, 129, 77),
        (64, 65, 130),
        (3, 16, 8),
        (100, 300, 520),
    ];
    for (tokens, rows, cols) in shapes {
        for dt in DTYPES {
            for variant in MatmulVariant::ALL {
                for accumulate in [false, true] {
                    if accumulate && variant.has_silu() {
                        continue;
                    }
                    let (got, want) = run_matmul(
                        &d, &mut rng, dt, variant, true, tokens, rows, cols, accumulate,
                    );
                    let e = nmse(&got, &want);
                    let what =
                        format!("cm {variant:?} acc={accumulate} {dt:?} t{tokens} {rows}x{cols}");
                    println!("{what}: NMSE {e:e}");
                    if e > NMSE_MAX_CM {
                        failures.push(format!("{what}: NMSE {e:e} > {NMSE_MAX_CM:e}"));
                    }
                }
            }
        }
    }
    if !failures.is_empty() {
        print_identity_probe(&d);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Diagnostic for a failing cooperative-matrix kernel: W = identity (16 x 16), x[t, c] =
/// 100 t + c, so y[t, r] must be 100 t + r; prints what came back.
fn print_identity_probe(d: &Device) {
    let n = 16u32;
    let w: Vec<f32> = (0..n * n).map(|i| (i / n == i % n) as u32 as f32).collect();
    let x: Vec<f32> = (0..n * n).map(|i| (100 * (i / n) + i % n) as f32).collect();
    let wb = weight_buffer(d, WeightDtype::F16, n as usize, n as usize, &w);
    let xb = f32_buffer(d, "x", &x, ResourceClass::TokenScratch);
    let yb = f32_buffer(
        d,
        "y",
        &vec![f32::NAN; (n * n) as usize],
        ResourceClass::TokenScratch,
    );
    let k = d
        .pipeline(matmul(WeightDtype::F16, MatmulVariant::Plain, true))
        .unwrap();
    let mut enc = d.encoder().unwrap();
    enc.dispatch(
        &k,
        matmul_groups(n, n, true),
        &[wb.slice(..), xb.slice(..), yb.slice(..)],
        &MatmulPush::new(n, n, n),
    )
    .unwrap();
    enc.submit().unwrap().wait().unwrap();
    let y: Vec<f32> = yb.read(0, (n * n) as usize).unwrap();
    for t in 0..n as usize {
        println!("identity probe y[{t}] = {:?}", &y[t * 16..t * 16 + 16]);
    }
}

/// Speed probe (run by hand on a GPU: `--ignored --nocapture`): TFLOP/s of the matmul
/// kernels at M = 512 tokens for the Qwen3-0.6B / 4B projection shapes.
#[test]
#[ignore]
fn matmul_speed_probe() {
    let d = coopmat_device();
    let cm = d.info().coopmat_f16_16x16;
    println!("device {} coopmat {cm}", d.info().name);
    let m = 512u32;
    for (n, k) in [
        (1024u32, 1024u32),
        (3072, 1024),
        (1024, 3072),
        (2560, 2560),
        (9728, 2560),
        (2560, 9728),
    ] {
        let wb = weight_buffer(
            &d,
            WeightDtype::F16,
            n as usize,
            k as usize,
            &vec![0.01; (n * k) as usize],
        );
        let xb = f32_buffer(
            &d,
            "x",
            &vec![0.5; (m * k) as usize],
            ResourceClass::TokenScratch,
        );
        let yb = f32_buffer(
            &d,
            "y",
            &vec![0.0; (m * n) as usize],
            ResourceClass::TokenScratch,
        );
        let p = MatmulPush::new(n, k, m);
        let mut line = format!("M={m} N={n} K={k}");
        for coop in [true, false] {
            if coop && !cm {
                continue;
            }
            let kern = d
                .pipeline(matmul(WeightDtype::F16, MatmulVariant::Plain, coop))
                .unwrap();
            let groups = matmul_groups(n, m, coop);
            let reps = 50;
            let mut best = f64::MAX;
            let mut times = Vec::new();
            for _ in 0..5 {
                let mut enc = d.encoder().unwrap();
                for _ in 0..reps {
                    enc.dispatch(
                        &kern,
                        groups,
                        &[wb.slice(..), xb.slice(..), yb.slice(..)],
                        &p,
                    )
                    .unwrap();
                }
                let t = std::time::Instant::now();
                enc.submit().unwrap().wait().unwrap();
                let s = t.elapsed().as_secs_f64() / reps as f64;
                best = best.min(s);
                times.push(s);
            }
            times.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let flops = 2.0 * m as f64 * n as f64 * k as f64;
            line += &format!(
                " | {}: median {:.1} TFLOP/s, best {:.1} ({:.1} us)",
                if coop { "coopmat" } else { "tiled" },
                flops / times[2] / 1e12,
                flops / best / 1e12,
                best * 1e6
            );
            let y: Vec<f32> = yb.read(0, 4).unwrap();
            let want = 0.5 * round_to(WeightDtype::F16, 0.01) * k as f32;
            if (y[0] - want).abs() > 1e-2 * want {
                line += &format!(" WRONG RESULT {} vs {want}", y[0]);
            }
        }
        println!("{line}");
    }
}

#[test]
fn attention_prefill_matches_causal_reference() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    // (heads, kv_heads, head_dim, first position, tokens): GQA and MHA, positions > 0,
    // odd lengths, a chunk that reaches the capacity.
    let cases = [
        (4u32, 2u32, 64u32, 0u32, 17u32),
        (6, 2, 128, 5, 3),
        (2, 1, 32, 30, 1),
        (3, 3, 256, 11, 33),
        (4, 1, 22, 63, 17),
    ];
    attention_prefill_cases(
        &d,
        &ATTENTION_PREFILL,
        ATTENTION_PREFILL_QUERIES,
        80,
        &cases,
        NMSE_MAX,
    );
}

/// The matrix-unit prefill attentions (heads of 128 and 64 dims) against the same
/// reference: several 64-query blocks and 32-position tiles, blocks cut by the chunk's end
/// and by the capacity, GQA and MHA. Without matrix units (lavapipe) only the selector is
/// checked.
#[test]
fn attention_prefill_cm_matches_causal_reference() {
    let d = sluice::testing::coopmat_or_test_device();
    let coopmat = d.info().coopmat_f16_16x16;
    // Other head sizes keep the scalar kernel everywhere.
    for hd in [16, 32, 96, 256] {
        assert_eq!(
            attention_prefill_kernel(hd, coopmat).0.name,
            ATTENTION_PREFILL.name
        );
    }
    if !coopmat {
        for hd in [64, 128] {
            assert_eq!(
                attention_prefill_kernel(hd, coopmat).0.name,
                ATTENTION_PREFILL.name
            );
        }
        eprintln!(
            "{}: no cooperative matrices; only the selector is checked",
            d.info().name
        );
        return;
    }
    // (heads, kv_heads, first position, tokens) for each head size: GQA and MHA, several
    // 64-query blocks and tiles, chunks cut short; SmolLM2-135M's 9 query heads over 3.
    let cases = [
        (4u32, 2u32, 0u32, 100u32),
        (8, 2, 37, 3),
        (2, 2, 0, 1),
        (4, 1, 61, 140),
        (16, 8, 200, 64),
        (9, 3, 0, 130),
    ];
    for (hd, want) in [
        (128u32, &ATTENTION_PREFILL_CM),
        (64, &ATTENTION_PREFILL_CM64),
    ] {
        let (kernel, queries) = attention_prefill_kernel(hd, coopmat);
        assert_eq!((kernel.name, queries), (want.name, 64));
        let cases: Vec<_> = cases
            .iter()
            .map(|&(h, kv, pos, n)| (h, kv, hd, pos, n))
            .collect();
        // f16 queries and weights on the matrix units (the scalar kernel keeps f32 queries).
        attention_prefill_cases(&d, kernel, queries, 256, &cases, 2e-5);
    }
}

/// Runs `kernel` (`queries` per workgroup) on each case `(heads, kv_heads, head_dim, first
/// position, tokens)` over random caches of `capacity` positions and compares every
/// written output with [`attention_prefill_cpu`] (NMSE <= `nmse`); the padding after each
/// token's row must stay unwritten.
fn attention_prefill_cases(
    d: &Device,
    kernel: &sluice::KernelDesc,
    queries: u32,
    capacity: u32,
    cases: &[(u32, u32, u32, u32, u32)],
    nmse: f64,
) {
    let k = d.pipeline(kernel).unwrap();
    let mut rng = Rng::new(21);
    for &(heads, kv_heads, hd, pos, tokens) in cases {
        let cache_len = (kv_heads * capacity * hd) as usize;
        // The whole cache is random: positions beyond each query's reach must be ignored.
        let (kc, vc, kc_f, vc_f) = random_kv_caches(d, &mut rng, cache_len);
        let q_stride = heads * hd + 4;
        let o_stride = heads * hd + 1;
        let p = AttnPrefillPush {
            heads,
            kv_heads,
            head_dim: hd,
            capacity,
            tokens,
            q_stride,
            o_stride,
            scale: 1.0 / (hd as f32).sqrt(),
        };
        let q = rng.vec((tokens * q_stride) as usize, 3.0);
        let qb = f32_buffer(d, "q", &q, ResourceClass::TokenScratch);
        let params = u32_buffer(d, "params", &[0, pos, pos + 1, 0], ResourceClass::Generic);
        let n_out = (tokens * o_stride) as usize;
        let ob = f32_buffer(
            d,
            "out",
            &vec![f32::NAN; n_out],
            ResourceClass::TokenScratch,
        );
        let mut enc = d.encoder().unwrap();
        enc.dispatch(
            &k,
            attention_prefill_groups(queries, tokens, heads),
            &[
                params.slice(..),
                qb.slice(..),
                kc.slice(..),
                vc.slice(..),
                ob.slice(..),
            ],
            &p,
        )
        .unwrap();
        enc.submit().unwrap().wait().unwrap();
        let got: Vec<f32> = ob.read(0, n_out).unwrap();
        let want = attention_prefill_cpu(&p, pos + 1, &q, &kc_f, &vc_f);
        let (mut g, mut w) = (Vec::new(), Vec::new());
        for t in 0..tokens as usize {
            let row = t * o_stride as usize;
            let n = (heads * hd) as usize;
            g.extend_from_slice(&got[row..row + n]);
            w.extend_from_slice(&want[row..row + n]);
            assert!(got[row + n].is_nan(), "gap after token {t} written");
        }
        assert_close(
            &format!(
                "{} {heads}/{kv_heads} hd {hd} pos {pos} tokens {tokens}",
                kernel.name
            ),
            &g,
            &w,
            nmse,
        );
    }
}

/// Speed of f16 matrix products with operands reloaded from shared memory in the layouts a
/// staged kernel could use (H100 only; `--ignored --nocapture`).
#[test]
#[ignore]
fn coop_load_speed_probe() {
    let d = coopmat_device();
    if !d.info().coopmat_f16_16x16 {
        eprintln!("no matrix units");
        return;
    }
    let groups = 132 * 64u32;
    let k = d.pipeline(&COOP_LOAD_PROBE).unwrap();
    let c = d
        .create_buffer("c", groups as u64 * 1024, ResourceClass::TokenScratch)
        .unwrap();
    let names = [
        "registers",
        "A, B from array<f16>, stride 16",
        "A, B from array<f16>, stride 24",
        "A, B from array<f16>, stride 40",
        "A, B from array<vec4<f16>>, stride 40 halves",
        "A only from array<vec4<f16>>, stride 40 halves",
    ];
    for (mode, name) in names.iter().enumerate() {
        let reps = 1024u32;
        let p = CoopLoadProbePush {
            mode: mode as u32,
            reps,
        };
        let best = best_dispatch_secs(&d, &k, [groups, 1, 1], &[c.slice(..)], &p, 10);
        let flops = 2.0 * 4096.0 * 4.0 * reps as f64 * groups as f64;
        println!(
            "f16 16x16x16, {groups} subgroups, {name}: {:.1} us, {:.0} TFLOP/s",
            best * 1e6,
            flops / best / 1e12
        );
    }
}
