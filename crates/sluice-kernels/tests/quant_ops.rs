//! The block-format variants of the matvec family and `embed` against CPU references,
//! with synchronization validation on.
//!
//! Reference: the weights are quantized on the CPU (`quantize`), dequantized
//! (`dequantize`, bit-exact with llama.cpp), and multiplied in f64. The GPU decodes the
//! same blocks, so only f32 summation order differs: NMSE bound 1e-6 for every matvec
//! path (as for the float kernels in ops.rs); `embed` copies decoded values, NMSE 1e-12.
//! Shapes are odd on purpose: rows not a multiple of the rows per workgroup, several
//! blocks (and several work units per thread) per row.

use sluice::kernel::KernelDesc;
use sluice::testing::{test_device, ValidationGuard};
use sluice::{Buffer, Device, ResourceClass};
use sluice_kernels::quant::QUANT_DTYPES;

mod common;
use common::{assert_nmse as assert_close, *};
use sluice_kernels::*;

const NMSE_MAX: f64 = 1e-6;
const NMSE_EMBED: f64 = 1e-12;

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32
    }
    /// Uniform in [-1, 1) times `scale`, plus a per-32 offset so blocks differ in range.
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let u = (self.next_u32() >> 8) as f32 / (1u32 << 23) as f32 - 1.0;
                u * scale + if (i / 32) % 3 == 1 { 0.3 * scale } else { 0.0 }
            })
            .collect()
    }
}

/// A quantized matrix: GPU buffer plus the dequantized values the reference uses.
struct QMat {
    buf: Buffer,
    deq: Vec<f32>,
}

fn qmat(d: &Device, dt: WeightDtype, rows: usize, cols: usize, w: &[f32]) -> QMat {
    let file = quantize(dt, rows, cols, w);
    let deq = dequantize(dt, rows, cols, &file);
    let gpu = to_gpu_layout(dt, rows, cols, &file);
    assert_eq!(
        gpu.len() as u64,
        gpu_matrix_bytes(dt, rows as u64, cols as u64).unwrap()
    );
    // pack_weights is the same pipeline.
    assert_eq!(gpu, pack_weights(dt, rows, cols, w));
    let buf = d
        .create_buffer("w", gpu.len() as u64, ResourceClass::ReadOnlyWeight)
        .unwrap();
    buf.write_bytes(0, &gpu).unwrap();
    QMat { buf, deq }
}

/// Shapes per format: 32-element blocks get cols = 32k, K-quants 256k.
fn shapes(dt: WeightDtype) -> &'static [(usize, usize)] {
    if dt.block_elems() == 256 {
        &[(37, 256), (5, 1280)]
    } else {
        &[(37, 96), (6, 2080)]
    }
}

#[test]
fn quant_matvec_matches_reference() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(31);
    for dt in QUANT_DTYPES {
        let k = d.pipeline(matvec(dt)).unwrap();
        for &(rows, cols) in shapes(dt) {
            let w = rng.vec(rows * cols, 1.0);
            let x = rng.vec(cols, 1.0);
            let y0 = rng.vec(rows, 1.0);
            let m = qmat(&d, dt, rows, cols, &w);
            let xb = f32_buffer(&d, "x", &x, ResourceClass::TokenScratch);
            assert_eq!(matvec_x_bytes(dt, cols as u32), xb.size());
            for (acc, tpr) in [
                (false, None),
                (true, None),
                (false, Some(32)),
                (true, Some(128)),
                // Below the subgroup size (lane sums by shuffles).
                (false, Some(4)),
                (true, Some(8)),
                // 2 and 1 rows per thread group.
                (false, Some(quant_tpr_field(16, 2))),
                (true, Some(quant_tpr_field(64, 1))),
            ] {
                let yb = if acc {
                    f32_buffer(&d, "y", &y0, ResourceClass::TokenScratch)
                } else {
                    f32_buffer(&d, "y", &vec![f32::NAN; rows], ResourceClass::TokenScratch)
                };
                let push = matvec_push(dt, rows as u32, cols as u32, acc, 0.0, tpr);
                let mut enc = d.encoder().unwrap();
                enc.dispatch(
                    &k,
                    matvec_groups_dt(dt, rows as u32, cols as u32, tpr),
                    &[m.buf.slice(..), xb.slice(..), yb.slice(..)],
                    &push,
                )
                .unwrap();
                enc.submit().unwrap().wait().unwrap();
                let got: Vec<f32> = yb.read(0, rows).unwrap();
                let want = matvec_cpu(&m.deq, rows, cols, &x, acc.then_some(&y0[..]));
                assert_close(
                    &format!("matvec {} {rows}x{cols} acc {acc} tpr {tpr:?}", dt.name()),
                    &got,
                    &want,
                    NMSE_MAX,
                );
            }
        }
    }
}

#[test]
fn quant_fused_variants_match_reference() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(32);
    let eps = 1e-5;
    for dt in QUANT_DTYPES {
        for &(rows, cols) in shapes(dt) {
            let wg = rng.vec(rows * cols, 0.3);
            let wu = rng.vec(rows * cols, 0.3);
            let x = rng.vec(cols, 2.0);
            let nw = rng.vec(cols, 1.0);
            let y0 = rng.vec(rows, 1.0);
            let xn = rmsnorm_cpu(&x, &nw, cols, eps);
            let (g, u) = (qmat(&d, dt, rows, cols, &wg), qmat(&d, dt, rows, cols, &wu));
            let xb = f32_buffer(&d, "x", &x, ResourceClass::TokenScratch);
            let nb = f32_buffer(&d, "norm", &nw, ResourceClass::ReadOnlyWeight);
            let y_norm = f32_buffer(&d, "y", &y0, ResourceClass::TokenScratch);
            let nan = vec![f32::NAN; rows];
            let y_silu = f32_buffer(&d, "y_silu", &nan, ResourceClass::TokenScratch);
            let y_sn = f32_buffer(&d, "y_sn", &nan, ResourceClass::TokenScratch);
            let groups = matvec_groups_dt(dt, rows as u32, cols as u32, None);
            let (r32, c32) = (rows as u32, cols as u32);
            let mut enc = d.encoder().unwrap();
            let k = d.pipeline(matvec_norm(dt)).unwrap();
            enc.dispatch(
                &k,
                groups,
                &[
                    g.buf.slice(..),
                    xb.slice(..),
                    nb.slice(..),
                    y_norm.slice(..),
                ],
                &matvec_push(dt, r32, c32, true, eps, None),
            )
            .unwrap();
            // One wait per dispatch: lavapipe compiles a pipeline at its first dispatch,
            // and a loaded CI machine must not push one wait past the device timeout.
            enc.submit().unwrap().wait().unwrap();
            let mut enc = d.encoder().unwrap();
            let k = d.pipeline(matvec_silu(dt)).unwrap();
            enc.dispatch(
                &k,
                groups,
                &[
                    g.buf.slice(..),
                    u.buf.slice(..),
                    xb.slice(..),
                    y_silu.slice(..),
                ],
                &matvec_push(dt, r32, c32, false, eps, None),
            )
            .unwrap();
            enc.submit().unwrap().wait().unwrap();
            let mut enc = d.encoder().unwrap();
            let k = d.pipeline(matvec_silu_norm(dt)).unwrap();
            let slices = [
                g.buf.slice(..),
                u.buf.slice(..),
                xb.slice(..),
                nb.slice(..),
                y_sn.slice(..),
            ];
            enc.dispatch(
                &k,
                groups,
                &slices,
                &matvec_push(dt, r32, c32, false, eps, None),
            )
            .unwrap();
            enc.submit().unwrap().wait().unwrap();
            let what = |k: &str| format!("{k} {} {rows}x{cols}", dt.name());
            assert_close(
                &what("matvec_norm"),
                &y_norm.read::<f32>(0, rows).unwrap(),
                &matvec_cpu(&g.deq, rows, cols, &xn, Some(&y0)),
                NMSE_MAX,
            );
            assert_close(
                &what("matvec_silu"),
                &y_silu.read::<f32>(0, rows).unwrap(),
                &matvec_silu_cpu(&g.deq, &u.deq, rows, cols, &x),
                NMSE_MAX,
            );
            assert_close(
                &what("matvec_silu_norm"),
                &y_sn.read::<f32>(0, rows).unwrap(),
                &matvec_silu_cpu(&g.deq, &u.deq, rows, cols, &xn),
                NMSE_MAX,
            );
        }
    }
}

#[test]
fn quant_tokens_variants_match_reference() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(33);
    let eps = 1e-5;
    let tokens = 3usize;
    for dt in QUANT_DTYPES {
        let (rows, cols) = shapes(dt)[0];
        // Token t's x starts at vec4 t * x_stride4 (a gap after each), y at t * y_stride.
        let x_stride4 = cols / 4 + 2;
        let y_stride = rows + 3;
        let wg = rng.vec(rows * cols, 0.3);
        let wu = rng.vec(rows * cols, 0.3);
        let nw = rng.vec(cols, 1.0);
        let xs: Vec<Vec<f32>> = (0..tokens).map(|_| rng.vec(cols, 2.0)).collect();
        let mut xflat = vec![f32::NAN; tokens * x_stride4 * 4];
        for (t, x) in xs.iter().enumerate() {
            xflat[t * x_stride4 * 4..t * x_stride4 * 4 + cols].copy_from_slice(x);
        }
        let (g, u) = (qmat(&d, dt, rows, cols, &wg), qmat(&d, dt, rows, cols, &wu));
        let xb = f32_buffer(&d, "x", &xflat, ResourceClass::TokenScratch);
        let nb = f32_buffer(&d, "norm", &nw, ResourceClass::ReadOnlyWeight);
        let y0 = rng.vec(tokens * y_stride, 1.0);
        let ys: Vec<Buffer> = (0..3)
            .map(|i| f32_buffer(&d, &format!("y{i}"), &y0, ResourceClass::TokenScratch))
            .collect();
        let [k_plain, k_norm, k_silu_norm] = matvec_tokens(dt);
        let [gx, gy, _] = matvec_groups_dt(dt, rows as u32, cols as u32, None);
        let groups = [gx, gy, tokens as u32];
        let push = |acc| MatvecPush {
            x_stride4: x_stride4 as u32,
            y_stride: y_stride as u32,
            ..matvec_push(dt, rows as u32, cols as u32, acc, eps, None)
        };
        let mut enc = d.encoder().unwrap();
        let k = d.pipeline(k_plain).unwrap();
        enc.dispatch(
            &k,
            groups,
            &[g.buf.slice(..), xb.slice(..), ys[0].slice(..)],
            &push(true),
        )
        .unwrap();
        // One wait per dispatch (see quant_fused_variants_match_reference).
        enc.submit().unwrap().wait().unwrap();
        let mut enc = d.encoder().unwrap();
        let k = d.pipeline(k_norm).unwrap();
        enc.dispatch(
            &k,
            groups,
            &[g.buf.slice(..), xb.slice(..), nb.slice(..), ys[1].slice(..)],
            &push(false),
        )
        .unwrap();
        enc.submit().unwrap().wait().unwrap();
        let mut enc = d.encoder().unwrap();
        let k = d.pipeline(k_silu_norm).unwrap();
        let slices = [
            g.buf.slice(..),
            u.buf.slice(..),
            xb.slice(..),
            nb.slice(..),
            ys[2].slice(..),
        ];
        enc.dispatch(&k, groups, &slices, &push(false)).unwrap();
        enc.submit().unwrap().wait().unwrap();
        let got: Vec<Vec<f32>> = ys
            .iter()
            .map(|b| b.read(0, tokens * y_stride).unwrap())
            .collect();
        for (t, x) in xs.iter().enumerate() {
            let xn = rmsnorm_cpu(x, &nw, cols, eps);
            let yo = t * y_stride;
            let y0t = &y0[yo..yo + rows];
            let what = |k: &str| format!("{k} {} token {t}", dt.name());
            let wants = [
                matvec_cpu(&g.deq, rows, cols, x, Some(y0t)),
                matvec_cpu(&g.deq, rows, cols, &xn, None),
                matvec_silu_cpu(&g.deq, &u.deq, rows, cols, &xn),
            ];
            for (i, want) in wants.iter().enumerate() {
                assert_close(&what(k_plain.name), &got[i][yo..yo + rows], want, NMSE_MAX);
                // Rows between tokens' outputs are untouched.
                assert_eq!(
                    &got[i][yo + rows..yo + y_stride],
                    &y0[yo + rows..yo + y_stride]
                );
            }
        }
    }
}

#[test]
fn quant_embed_matches_dequantized_rows() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(34);
    for dt in QUANT_DTYPES {
        let (vocab, cols) = (19usize, shapes(dt)[1].1);
        let table = rng.vec(vocab * cols, 1.0);
        let m = qmat(&d, dt, vocab, cols, &table);
        let k = d.pipeline(embed(dt)).unwrap();
        // Decode: params.token; prefill: the prompt tokens after the header, one per y.
        let prompt = [18u32, 0, 7];
        let mut params = vec![5u32, 3, 4, 0];
        params.extend(prompt);
        let pb = d
            .create_buffer("params", (params.len() * 4) as u64, ResourceClass::Generic)
            .unwrap();
        pb.write(0, &params).unwrap();
        let x1 = f32_buffer(&d, "x1", &vec![f32::NAN; cols], ResourceClass::TokenScratch);
        let xs = cols + 5;
        let xp = f32_buffer(
            &d,
            "xp",
            &vec![f32::NAN; 3 * xs],
            ResourceClass::TokenScratch,
        );
        let [gx, _, _] = embed_groups_dt(dt, cols as u32);
        let mut enc = d.encoder().unwrap();
        enc.dispatch(
            &k,
            [gx, 1, 1],
            &[pb.slice(..), m.buf.slice(..), x1.slice(..)],
            &embed_push(dt, cols as u32, false, 0),
        )
        .unwrap();
        enc.submit().unwrap().wait().unwrap();
        let mut enc = d.encoder().unwrap();
        enc.dispatch(
            &k,
            [gx, 3, 1],
            &[pb.slice(..), m.buf.slice(..), xp.slice(..)],
            &embed_push(dt, cols as u32, true, xs as u32),
        )
        .unwrap();
        enc.submit().unwrap().wait().unwrap();
        assert_close(
            &format!("embed {} token 5", dt.name()),
            &x1.read::<f32>(0, cols).unwrap(),
            &embed_cpu(&m.deq, cols, 5),
            NMSE_EMBED,
        );
        let got: Vec<f32> = xp.read(0, 3 * xs).unwrap();
        for (i, &t) in prompt.iter().enumerate() {
            assert_close(
                &format!("embed prefill {} token {t}", dt.name()),
                &got[i * xs..i * xs + cols],
                &embed_cpu(&m.deq, cols, t),
                NMSE_EMBED,
            );
        }
    }
}

/// Runs a decode probe (`decode16h_probe_*`, `cmdq_reader_probe_*`: one invocation per 16
/// weights of the `rows` x `cols` matrix `m`) and reads `floats` of its output.
fn run_decode_probe(
    d: &Device,
    k: &KernelDesc,
    dt: WeightDtype,
    m: &QMat,
    rows: usize,
    cols: usize,
    floats: usize,
) -> Vec<f32> {
    let out = f32_buffer(
        d,
        "out",
        &vec![f32::NAN; floats],
        ResourceClass::TokenScratch,
    );
    let push = Decode16ProbePush {
        rows: rows as u32,
        cols: cols as u32,
        w_stride: row_stride_field(dt, cols as u32),
    };
    let groups = [(rows * cols / 16).div_ceil(64) as u32, 1, 1];
    run_one(
        d,
        k,
        groups,
        &[m.buf.slice(..), out.slice(..)],
        &push,
        &out,
        floats,
    )
}

/// A probe's f16-decoded weights `got` against the CPU dequantization `deq` (rows of
/// `cols`): every weight within 2^-9 of its 32-weight sub-block's largest magnitude (the
/// scales rounded to f16 first), and NMSE <= 1e-6.
fn assert_f16_decode(label: &str, got: &[f32], deq: &[f32], cols: usize) {
    for (i, (&g, &w)) in got.iter().zip(deq).enumerate() {
        let sub = &deq[i / 32 * 32..i / 32 * 32 + 32];
        let big = sub.iter().fold(0f32, |a, v| a.max(v.abs()));
        assert!(
            (g - w).abs() <= big / 512.0,
            "{label}: row {} column {}: {g} vs the CPU's {w} (sub-block max {big})",
            i / cols,
            i % cols
        );
    }
    assert_close(label, got, deq, NMSE_MAX);
}

/// The f16 K-quant decoders (Q4_K, Q5_K, Q6_K) of the row-owning staged batched matvec
/// (a kernel that needs matrix units) through `decode16h_probe`: every weight within 2^-9
/// of its 32-weight sub-block's largest magnitude of the CPU dequantization (scales and
/// mins are rounded to f16 before one packed fma or product), NMSE <= 1e-6; and the
/// module holds the bitcast build.rs puts in `h2_bits`.
#[test]
fn decode16h_is_the_dequantization_in_f16() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(36);
    for (dt, k) in [
        (WeightDtype::Q4K, &DECODE16H_PROBE_Q4_K),
        (WeightDtype::Q5K, &DECODE16H_PROBE_Q5_K),
        (WeightDtype::Q6K, &DECODE16H_PROBE_Q6_K),
    ] {
        let (rows, cols) = (5usize, 1280usize);
        let m = qmat(&d, dt, rows, cols, &rng.vec(rows * cols, 1.0));
        let got = run_decode_probe(&d, k, dt, &m, rows, cols, rows * cols);
        assert_f16_decode(&format!("decode16h {}", dt.name()), &got, &m.deq, cols);
        assert!(
            has_half_pair_bitcast(k.spirv),
            "{}: no OpBitcast to vec2<f16> (build.rs half_pair_fixup)",
            k.name
        );
    }
}

/// The readers of the register-built matrix-unit operands (`matvec_batch_cmd_q4_k` /
/// `_q6_k`, kernels that need matrix units) through `cmdq_reader_probe_*`: for every token
/// column, the weight the kernel pairs with it (its stage place by `x_pos`, the fragment
/// element there by `cmd_b_element`'s map, that invocation's load and scales) is the CPU
/// dequantization of that column, within 2^-9 of its 32-weight sub-block's largest
/// magnitude (scales rounded to f16 first), NMSE <= 1e-6. A wrong K permutation puts
/// another column's weight there.
#[test]
fn cmdq_readers_pair_each_column_with_its_weight() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(37);
    for (dt, k) in [
        (WeightDtype::Q4K, &CMDQ_READER_PROBE_Q4_K),
        (WeightDtype::Q6K, &CMDQ_READER_PROBE_Q6_K),
    ] {
        let (rows, cols) = (5usize, 1280usize);
        let m = qmat(&d, dt, rows, cols, &rng.vec(rows * cols, 1.0));
        let got = run_decode_probe(&d, k, dt, &m, rows, cols, rows * cols);
        assert_f16_decode(k.name, &got, &m.deq, cols);
    }
}

/// Whether a SPIR-V module has an OpBitcast whose result is a vector of two 16-bit floats.
fn has_half_pair_bitcast(bytes: &[u8]) -> bool {
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut insts = Vec::new();
    let mut i = 5;
    while i < words.len() {
        let count = (words[i] >> 16) as usize;
        if count == 0 || i + count > words.len() {
            return false;
        }
        insts.push(&words[i..i + count]);
        i += count;
    }
    let op = |w: &[u32]| w[0] & 0xffff;
    let f16: Vec<u32> = insts
        .iter()
        .filter(|w| op(w) == 22 && w[2] == 16)
        .map(|w| w[1])
        .collect();
    let h2: Vec<u32> = insts
        .iter()
        .filter(|w| op(w) == 23 && f16.contains(&w[2]) && w[3] == 2)
        .map(|w| w[1])
        .collect();
    insts.iter().any(|w| op(w) == 124 && h2.contains(&w[1]))
}

#[test]
fn helpers_and_variants_cover_every_dtype() {
    for dt in quant::ALL_DTYPES {
        for k in [
            matvec(dt),
            matvec_norm(dt),
            matvec_silu(dt),
            matvec_silu_norm(dt),
            embed(dt),
        ]
        .into_iter()
        .chain(matvec_tokens(dt))
        {
            assert!(k.name.ends_with(dt.name()), "{} for {}", k.name, dt.name());
        }
        // Integer-dot variants: every block format, every matvec-family stem, with the
        // bindings, push constants and workgroup of the f32-decoder kernel they replace.
        for stem in [
            "matvec",
            "matvec_norm",
            "matvec_silu",
            "matvec_silu_norm",
            "matvec_tokens",
            "matvec_norm_tokens",
            "matvec_silu_tokens",
            "matvec_silu_norm_tokens",
        ] {
            let plain = matvec_kernel(stem, dt, false).unwrap();
            let dp = matvec_kernel(stem, dt, true).unwrap();
            assert_eq!(has_int_dot(dt), dt.is_quantized());
            if has_int_dot(dt) {
                assert_eq!(dp.name, format!("{}_dp", plain.name));
                assert_eq!(dp.bindings, plain.bindings, "{}", dp.name);
                assert_eq!(dp.push_constant_bytes, plain.push_constant_bytes);
                assert_eq!(dp.workgroup_size, plain.workgroup_size);
            } else {
                assert_eq!(dp.name, plain.name);
            }
        }
        assert!(matvec_kernel("no_such_stem", dt, true).is_none());
    }
    // Float helpers equal the existing rules.
    let p = matvec_push(WeightDtype::F16, 37, 100, true, 1e-5, None);
    assert_eq!((p.stride8, p.accumulate, p.threads_per_row), (13, 1, 0));
    assert_eq!(matvec_x_bytes(WeightDtype::F16, 100), 13 * 32);
    assert_eq!(
        matvec_groups_dt(WeightDtype::F16, 37, 100, None),
        matvec_groups(37, 100)
    );
    assert_eq!(embed_push(WeightDtype::Bf16, 100, false, 0).stride8, 13);
    // Block formats: stride in vec4s of the GPU row.
    assert_eq!(
        matvec_push(WeightDtype::Q8_0, 3, 576, false, 0.0, None).stride8,
        39
    );
    assert_eq!(
        matvec_push(WeightDtype::Q4K, 3, 512, false, 0.0, None).stride8,
        18
    );
    assert_eq!(matvec_x_bytes(WeightDtype::Q4_1, 576), 576 * 4);
    assert_eq!(gpu_matrix_bytes(WeightDtype::Q6K, 10, 100), None);
    // The f16 LM head: 6 workgroups per multiprocessor instead of 37984.
    let f16_head = matvec_groups(151936, 1024);
    let p = matvec_norm_head_plan(WeightDtype::F16, 1024, f16_head, true, 132, 32).unwrap();
    assert_eq!(
        (p.kernel.name, p.groups, p.threads_per_row),
        ("matvec_norm_head_f16", [792, 1, 1], Some(32))
    );
    // The head with the greedy pick: the resident plan, its pick kernel beside it; where
    // there is none, the full grid only when asked and while it has at most
    // HEAD_PICK_FULL_GRID_MAX workgroups; the scratch holds either.
    let hp = head_pick_plan(WeightDtype::F16, 1024, f16_head, true, 132, 32, false).unwrap();
    assert_eq!(
        (hp.kernel.name, hp.pick.name, hp.groups),
        (
            "matvec_norm_head_f16",
            "matvec_norm_head_pick_f16",
            [792, 1, 1]
        )
    );
    assert!(head_pick_plan(WeightDtype::F16, 1024, f16_head, true, 0, 32, true).is_none());
    let small = matvec_groups(4096, 64);
    assert!(head_pick_plan(WeightDtype::F32, 64, small, false, 0, 8, false).is_none());
    let hp = head_pick_plan(WeightDtype::F32, 64, small, false, 0, 8, true).unwrap();
    assert_eq!(
        (hp.pick.name, hp.groups, hp.threads_per_row),
        ("matvec_norm_head_pick_f32", small, None)
    );
    assert!(small[0] <= HEAD_PICK_FULL_GRID_MAX);
    let words = greedy_scratch_words(151936, 132);
    assert!(
        words >= pick_scratch_words(792) && words >= argmax_scratch_words(argmax_groups(151936))
    );
    assert!(greedy_scratch_words(512, 0) >= pick_scratch_words(HEAD_PICK_FULL_GRID_MAX));
    // Never fewer threads per row than the subgroup.
    let p = matvec_norm_head_plan(WeightDtype::Bf16, 1024, f16_head, false, 132, 64).unwrap();
    assert_eq!(
        (p.kernel.name, p.threads_per_row),
        ("matvec_norm_head_bf16", Some(64))
    );
    // Block-format plan: lanes never exceed a row's work units (rounded up, >= 16), 4 rows
    // per group on large matrices, fewer when the threads in flight would be too few; the
    // dispatch covers every row.
    for dt in QUANT_DTYPES {
        for (rows, cols) in [(151936u32, 2560u32), (2560, 9728), (1024, 2048), (37, 256)] {
            let (t, nr) = quant_matvec_plan(dt, rows, cols);
            let unit = if dt == WeightDtype::Q5K { 64 } else { 32 };
            assert!(t.is_power_of_two() && (16..=QUANT_MATVEC_WG).contains(&t));
            assert!(t <= (cols / unit).next_power_of_two().max(16));
            assert!([1, 2, 4].contains(&nr));
            let [gx, gy, gz] = matvec_groups_dt(dt, rows, cols, None);
            assert_eq!(gz, 1);
            assert!(gx * gy * (QUANT_MATVEC_WG / t) * nr >= rows);
            let p = matvec_push(dt, rows, cols, false, 0.0, None);
            assert_eq!(p.threads_per_row, quant_tpr_field(t, nr));
        }
        assert_eq!(quant_matvec_plan(dt, 151936, 2560), (16, 4));
        assert_eq!(quant_matvec_plan(dt, 1024, 2048).1, 1);
        // The LM head's grid: the 0.6B's and the 4B's on 3 workgroups per multiprocessor
        // of 132; rows past MATVEC_RESIDENT_MAX_COLS, a device without a multiprocessor
        // count, token-batched grids and grids under 4 x 396 keep theirs.
        assert!(matvec_kernel("matvec_norm_head", dt, true).is_some());
        assert!(matvec_kernel("matvec_norm_head", dt, false).is_none());
        let head = matvec_groups_dt(dt, 151936, 1024, None);
        assert!(head[0] * head[1] > 4 * 396);
        assert_eq!(matvec_resident_grid(head, 1024, 132, 3), [396, 1, 1]);
        assert_eq!(matvec_resident_grid(head, 1024, 0, 3), head);
        let head4 = matvec_groups_dt(dt, 151936, 2560, None);
        assert_eq!(matvec_resident_grid(head4, 2560, 132, 3), [396, 1, 1]);
        let head8 = matvec_groups_dt(dt, 151936, 8192, None);
        assert_eq!(matvec_resident_grid(head8, 8192, 132, 3), head8);
        assert_eq!(
            matvec_resident_grid([4000, 1, 2], 1024, 132, 3),
            [4000, 1, 2]
        );
        assert_eq!(
            matvec_resident_grid([1500, 1, 1], 1024, 132, 3),
            [1500, 1, 1]
        );
        let p = matvec_norm_head_plan(dt, 1024, head, true, 132, 32).unwrap();
        let dp_head = format!("matvec_norm_head_{}_dp", dt.name());
        // The integer-dot heads keep their own threads per row (the push from the plan).
        assert_eq!(
            (p.kernel.name, p.groups, p.threads_per_row),
            (dp_head.as_str(), [396, 1, 1], None)
        );
        assert_eq!(
            head_pick_plan(dt, 1024, head, true, 132, 32, false)
                .unwrap()
                .pick
                .name,
            format!("matvec_norm_head_pick_{}_dp", dt.name())
        );
        // Without integer dot products a block format keeps matvec_norm's full grid.
        assert!(matvec_norm_head_plan(dt, 1024, head, false, 132, 32).is_none());
        assert!(head_pick_plan(
            dt,
            1024,
            matvec_groups_dt(dt, 64, 1024, None),
            false,
            0,
            32,
            true
        )
        .is_none());
        assert!(matvec_norm_head_plan(dt, 1024, head, true, 0, 32).is_none());
        assert_eq!(
            matvec_norm_head_plan(dt, 2560, head4, true, 132, 32)
                .unwrap()
                .groups,
            [396, 1, 1]
        );
        assert!(matvec_norm_head_plan(dt, 8192, head8, true, 132, 32).is_none());
        // The quantized handoff's producer: workgroups of whole 32-row blocks. qwen3-4b's
        // gate/up keeps its default plan (32 x 4); qwen3-0.6b's (32 x 1, 8 rows) moves to
        // 32 x 4 only for Q8_0 / Q4_0 / Q4_1; never rows off a block.
        let plan = quant_matvec_plan(dt, 9728, 2560);
        assert_eq!(plan, (32, 4), "{}", dt.name());
        assert_eq!(
            matvec_q8_handoff_tpr(dt, 9728, 2560),
            Some(quant_tpr_field(plan.0, plan.1))
        );
        let cheap = [WeightDtype::Q8_0, WeightDtype::Q4_0, WeightDtype::Q4_1].contains(&dt);
        assert_eq!(
            matvec_q8_handoff_tpr(dt, 3072, 1024),
            cheap.then(|| quant_tpr_field(32, 4)),
            "{}",
            dt.name()
        );
        assert_eq!(matvec_q8_handoff_tpr(dt, 3072 + 16, 1024), None);
        // The attention's handoff to o: the cheap formats at any size, Q4_K where o's plan
        // shares the records over four rows (qwen3-4b's 2560 x 4096, not qwen3-0.6b's
        // 1024 x 2048).
        let four = dt == WeightDtype::Q4K;
        assert_eq!(
            attn_q8_handoff_pays(dt, 2560, 4096),
            cheap || four,
            "{}",
            dt.name()
        );
        assert_eq!(attn_q8_handoff_pays(dt, 1024, 2048), cheap, "{}", dt.name());
        let xq8 = matvec_xq8(dt).unwrap();
        assert_eq!(xq8.name, format!("matvec_xq8_{}_dp", dt.name()));
        assert_eq!(xq8.bindings, matvec(dt).bindings);
        assert_eq!(xq8.push_constant_bytes, matvec(dt).push_constant_bytes);
    }
    assert!(matvec_xq8(WeightDtype::F16).is_none());
    assert_eq!(matvec_q8_handoff_tpr(WeightDtype::F16, 9728, 2560), None);
    assert!(!attn_q8_handoff_pays(WeightDtype::F16, 2560, 4096));
}

/// Byte offsets of the f16 scale fields of a block (set to finite values in random blocks).
fn scale_fields(dt: WeightDtype) -> &'static [usize] {
    match dt {
        WeightDtype::Q4_1 | WeightDtype::Q5_1 | WeightDtype::Q4K | WeightDtype::Q5K => &[0, 2],
        WeightDtype::Q6K => &[208],
        _ => &[0],
    }
}

/// Random block bytes (every quant, high-bit and 6-bit scale pattern, negative Q6_K
/// scales), not just what sluice's quantizer writes: the GPU decoders must agree with
/// the CPU dequantization on all of them.
#[test]
fn quant_matvec_on_random_blocks() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(35);
    for dt in QUANT_DTYPES {
        let (rows, cols) = (9usize, 2 * dt.block_elems() * 3);
        let nblocks = rows * cols / dt.block_elems();
        let mut file: Vec<u8> = (0..nblocks * dt.block_bytes())
            .map(|_| rng.next_u32() as u8)
            .collect();
        for b in 0..nblocks {
            for &o in scale_fields(dt) {
                let at = b * dt.block_bytes() + o;
                let v = half::f16::from_f32(rng.vec(1, 0.05)[0]);
                file[at..at + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        let deq = dequantize(dt, rows, cols, &file);
        let gpu = to_gpu_layout(dt, rows, cols, &file);
        let w = d
            .create_buffer("w", gpu.len() as u64, ResourceClass::ReadOnlyWeight)
            .unwrap();
        w.write_bytes(0, &gpu).unwrap();
        let x = rng.vec(cols, 1.0);
        let xb = f32_buffer(&d, "x", &x, ResourceClass::TokenScratch);
        let yb = f32_buffer(&d, "y", &vec![f32::NAN; rows], ResourceClass::TokenScratch);
        let k = d.pipeline(matvec(dt)).unwrap();
        let mut enc = d.encoder().unwrap();
        enc.dispatch(
            &k,
            matvec_groups_dt(dt, rows as u32, cols as u32, None),
            &[w.slice(..), xb.slice(..), yb.slice(..)],
            &matvec_push(dt, rows as u32, cols as u32, false, 0.0, None),
        )
        .unwrap();
        enc.submit().unwrap().wait().unwrap();
        assert_close(
            &format!("matvec {} random blocks", dt.name()),
            &yb.read::<f32>(0, rows).unwrap(),
            &matvec_cpu(&deq, rows, cols, &x, None),
            NMSE_MAX,
        );
    }
}

/// Integer-dot variants: NMSE bound against their CPU model (`quant_dp::matvec_dp_cpu`:
/// same x quantization, integer dots, same scale algebra; only f32 summation order and a
/// rare `x / d` rounding tie differ).
const NMSE_DP: f64 = 1e-6;
/// ... and against the exact product of the dequantized weights: what quantizing x to
/// int8 per 32 costs (measured 1e-7 .. 2e-5 at these shapes; printed with --nocapture).
const NMSE_DP_VS_F32: f64 = 5e-5;

/// Shapes of the integer-dot tests: odd row counts, and cols past one x tile of 8192
/// (the kernels quantize x tile by tile).
fn dp_shapes(dt: WeightDtype) -> &'static [(usize, usize)] {
    if dt.block_elems() == 256 {
        &[(37, 512), (5, 8448)]
    } else {
        &[(37, 96), (6, 8224)]
    }
}

/// One dispatch of `desc`, waited for; returns y's first `n` floats.
fn run_one<P: bytemuck::Pod>(
    d: &Device,
    desc: &KernelDesc,
    groups: [u32; 3],
    slices: &[sluice::BufferSlice<'_>],
    push: &P,
    y: &Buffer,
    n: usize,
) -> Vec<f32> {
    let k = d.pipeline(desc).unwrap();
    let mut enc = d.encoder().unwrap();
    enc.dispatch(&k, groups, slices, push).unwrap();
    enc.submit().unwrap().wait().unwrap();
    y.read(0, n).unwrap()
}

#[test]
fn quant_dp_variants_match_int_reference() {
    use sluice_kernels::quant_dp::{matvec_dp_cpu, quantize_x_q8};
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    assert!(
        d.info().int_dot,
        "the test device (lavapipe) enables shaderIntegerDotProduct"
    );
    let mut rng = Rng::new(35);
    let eps = 1e-5;
    for dt in QUANT_DTYPES.into_iter().filter(|&dt| has_int_dot(dt)) {
        let kern = |stem: &str| matvec_kernel(stem, dt, true).unwrap();
        assert!(kern("matvec").name.ends_with("_dp"));
        assert_eq!(
            matvec_kernel("matvec", dt, false).unwrap().name,
            matvec(dt).name
        );
        for &(rows, cols) in dp_shapes(dt) {
            let (r32, c32) = (rows as u32, cols as u32);
            let wg = rng.vec(rows * cols, 0.3);
            let wu = rng.vec(rows * cols, 0.3);
            let x = rng.vec(cols, 2.0);
            let nw = rng.vec(cols, 1.0);
            let y0 = rng.vec(rows, 1.0);
            let (fg, fu) = (quantize(dt, rows, cols, &wg), quantize(dt, rows, cols, &wu));
            let (g, u) = (qmat(&d, dt, rows, cols, &wg), qmat(&d, dt, rows, cols, &wu));
            // CPU model: x (or x * norm_w, with 1/rms applied to the sums) quantized per 32.
            let xw: Vec<f32> = x.iter().zip(&nw).map(|(a, b)| a * b).collect();
            let inv = 1.0 / (x.iter().map(|v| v * v).sum::<f32>() / cols as f32 + eps).sqrt();
            let (qx, qxw) = (quantize_x_q8(&x), quantize_x_q8(&xw));
            let gx = matvec_dp_cpu(dt, rows, cols, &fg, &qx);
            let ux = matvec_dp_cpu(dt, rows, cols, &fu, &qx);
            let gn: Vec<f32> = matvec_dp_cpu(dt, rows, cols, &fg, &qxw)
                .iter()
                .map(|v| v * inv)
                .collect();
            let un: Vec<f32> = matvec_dp_cpu(dt, rows, cols, &fu, &qxw)
                .iter()
                .map(|v| v * inv)
                .collect();
            let acc: Vec<f32> = gx.iter().zip(&y0).map(|(a, b)| a + b).collect();
            let what = |k: &str, extra: &str| format!("{k} {} {rows}x{cols} {extra}", dt.name());
            // The model itself is close to the exact product (x quantization error only).
            eprintln!(
                "{} {rows}x{cols}: x quantization NMSE {:.2e}",
                dt.name(),
                common::nmse(&gx, &matvec_cpu(&g.deq, rows, cols, &x, None))
            );
            assert_close(
                &what("model vs f32", ""),
                &gx,
                &matvec_cpu(&g.deq, rows, cols, &x, None),
                NMSE_DP_VS_F32,
            );

            let xb = f32_buffer(&d, "x", &x, ResourceClass::TokenScratch);
            let nb = f32_buffer(&d, "norm", &nw, ResourceClass::ReadOnlyWeight);
            let nan = vec![f32::NAN; rows];
            for (accumulate, tpr) in [
                (false, None),
                (true, None),
                (false, Some(4)),
                (true, Some(256)),
                (false, Some(quant_tpr_field(16, 2))),
                (true, Some(quant_tpr_field(64, 1))),
            ] {
                let yb = f32_buffer(
                    &d,
                    "y",
                    if accumulate { &y0 } else { &nan },
                    ResourceClass::TokenScratch,
                );
                let got = run_one(
                    &d,
                    kern("matvec"),
                    matvec_groups_dt(dt, r32, c32, tpr),
                    &[g.buf.slice(..), xb.slice(..), yb.slice(..)],
                    &matvec_push(dt, r32, c32, accumulate, 0.0, tpr),
                    &yb,
                    rows,
                );
                let want = if accumulate { &acc } else { &gx };
                assert_close(
                    &what("matvec_dp", &format!("acc {accumulate} tpr {tpr:?}")),
                    &got,
                    want,
                    NMSE_DP,
                );
            }
            let groups = matvec_groups_dt(dt, r32, c32, None);
            let yb = f32_buffer(&d, "y", &y0, ResourceClass::TokenScratch);
            let got = run_one(
                &d,
                kern("matvec_norm"),
                groups,
                &[g.buf.slice(..), xb.slice(..), nb.slice(..), yb.slice(..)],
                &matvec_push(dt, r32, c32, true, eps, None),
                &yb,
                rows,
            );
            let want: Vec<f32> = gn.iter().zip(&y0).map(|(a, b)| a + b).collect();
            assert_close(&what("matvec_norm_dp", ""), &got, &want, NMSE_DP);
            // The LM head's kernel on fewer workgroups than blocks of rows
            // (matvec_resident_grid): each takes every n-th block of rows; x quantized
            // once per workgroup (one tile), or again per block (cols past a tile, where
            // the norm's sum must still count x once). Groups of 64 lanes reduce through
            // shared memory; groups inside one subgroup (the subgroup's lanes, or 4)
            // write their rows themselves (one tile; blocks of 4 x 32 rows or more are
            // the whole matrix here, one block per workgroup).
            let sg = d.info().subgroup_size;
            for (i, tpr) in [
                quant_tpr_field(64, 1),
                quant_tpr_field(sg, 1),
                quant_tpr_field(sg, 4),
                quant_tpr_field(4, 2),
            ]
            .into_iter()
            .enumerate()
            {
                let tpr = Some(tpr);
                let full = matvec_groups_dt(dt, r32, c32, tpr);
                let n = full[0].saturating_sub(1).clamp(1, 3);
                // The 64-lane plan loops over blocks at every shape, a row per subgroup
                // at the one-tile shape (37 rows).
                if i == 0 || (i == 1 && c32 <= 8192) {
                    assert!(full[0] > n, "{full:?}");
                }
                let blocks = format!("{n} workgroups, tpr {tpr:?}");
                let yb = f32_buffer(&d, "y", &y0, ResourceClass::TokenScratch);
                let got = run_one(
                    &d,
                    kern("matvec_norm_head"),
                    [n, 1, 1],
                    &[g.buf.slice(..), xb.slice(..), nb.slice(..), yb.slice(..)],
                    &matvec_push(dt, r32, c32, true, eps, tpr),
                    &yb,
                    rows,
                );
                assert_close(&what("matvec_norm_head_dp", &blocks), &got, &want, NMSE_DP);
                // The same head with the greedy pick folded in: the same logits bit for
                // bit, and the pick of them (common::PickBuffers).
                let yp = f32_buffer(&d, "y", &y0, ResourceClass::TokenScratch);
                let p = PickBuffers::new(&d, n);
                let mut bindings = vec![g.buf.slice(..), xb.slice(..), nb.slice(..), yp.slice(..)];
                bindings.extend(p.slices());
                let push = MatvecPush {
                    pick_steps: 2,
                    ..matvec_push(dt, r32, c32, true, eps, tpr)
                };
                let logits = run_one(
                    &d,
                    kern("matvec_norm_head_pick"),
                    [n, 1, 1],
                    &bindings,
                    &push,
                    &yp,
                    rows,
                );
                let head = what("matvec_norm_head_pick_dp", &blocks);
                assert_eq!(bits(&logits), bits(&got), "{head}: logits");
                p.check(&head, &logits, 2);
            }
            let yb = f32_buffer(&d, "y", &nan, ResourceClass::TokenScratch);
            let got = run_one(
                &d,
                kern("matvec_silu"),
                groups,
                &[g.buf.slice(..), u.buf.slice(..), xb.slice(..), yb.slice(..)],
                &matvec_push(dt, r32, c32, false, eps, None),
                &yb,
                rows,
            );
            assert_close(
                &what("matvec_silu_dp", ""),
                &got,
                &silu_mul_cpu(&gx, &ux),
                NMSE_DP,
            );
            let got = run_one(
                &d,
                kern("matvec_silu_norm"),
                groups,
                &[
                    g.buf.slice(..),
                    u.buf.slice(..),
                    xb.slice(..),
                    nb.slice(..),
                    yb.slice(..),
                ],
                &matvec_push(dt, r32, c32, false, eps, None),
                &yb,
                rows,
            );
            let sn = silu_mul_cpu(&gn, &un);
            assert_close(&what("matvec_silu_norm_dp", ""), &got, &sn, NMSE_DP);

            // Token-batched forms: 2 tokens (the second's x = the first's, scaled by -0.5:
            // the same xq up to sign and d), strided x and y.
            let xs4 = cols / 4 + 2;
            let ys = rows + 3;
            let mut xflat = vec![f32::NAN; 2 * xs4 * 4];
            xflat[..cols].copy_from_slice(&x);
            for (i, v) in x.iter().enumerate() {
                xflat[xs4 * 4 + i] = -0.5 * v;
            }
            let xtb = f32_buffer(&d, "xt", &xflat, ResourceClass::TokenScratch);
            let yt0 = rng.vec(2 * ys, 1.0);
            let tpush = |accumulate| MatvecPush {
                x_stride4: xs4 as u32,
                y_stride: ys as u32,
                ..matvec_push(dt, r32, c32, accumulate, eps, None)
            };
            let tgroups = [groups[0], groups[1], 2];
            let cases: [(&str, bool, Vec<f32>); 4] = [
                ("matvec_tokens", true, acc.clone()),
                ("matvec_norm_tokens", false, gn.clone()),
                ("matvec_silu_tokens", false, silu_mul_cpu(&gx, &ux)),
                ("matvec_silu_norm_tokens", false, sn.clone()),
            ];
            for (stem, accumulate, want0) in cases {
                let yb = f32_buffer(&d, "yt", &yt0, ResourceClass::TokenScratch);
                let mut sl = vec![g.buf.slice(..)];
                if stem.contains("silu") {
                    sl.push(u.buf.slice(..));
                }
                sl.push(xtb.slice(..));
                if stem.contains("norm") {
                    sl.push(nb.slice(..));
                }
                sl.push(yb.slice(..));
                let got = run_one(
                    &d,
                    kern(stem),
                    tgroups,
                    &sl,
                    &tpush(accumulate),
                    &yb,
                    2 * ys,
                );
                // Token 0 is x itself; token 1 (-x / 2) follows from the same model.
                let half: Vec<f32> = x.iter().map(|v| -0.5 * v).collect();
                let hw: Vec<f32> = half.iter().zip(&nw).map(|(a, b)| a * b).collect();
                let (qh, qhw) = (quantize_x_q8(&half), quantize_x_q8(&hw));
                let inv1 =
                    1.0 / (half.iter().map(|v| v * v).sum::<f32>() / cols as f32 + eps).sqrt();
                let scale = |v: Vec<f32>, s: f32| v.into_iter().map(|a| a * s).collect::<Vec<_>>();
                let want1 = match stem {
                    "matvec_tokens" => matvec_dp_cpu(dt, rows, cols, &fg, &qh)
                        .iter()
                        .zip(&yt0[ys..])
                        .map(|(a, b)| a + b)
                        .collect(),
                    "matvec_norm_tokens" => scale(matvec_dp_cpu(dt, rows, cols, &fg, &qhw), inv1),
                    "matvec_silu_tokens" => silu_mul_cpu(
                        &matvec_dp_cpu(dt, rows, cols, &fg, &qh),
                        &matvec_dp_cpu(dt, rows, cols, &fu, &qh),
                    ),
                    _ => silu_mul_cpu(
                        &scale(matvec_dp_cpu(dt, rows, cols, &fg, &qhw), inv1),
                        &scale(matvec_dp_cpu(dt, rows, cols, &fu, &qhw), inv1),
                    ),
                };
                let want0: Vec<f32> = if accumulate {
                    gx.iter().zip(&yt0).map(|(a, b)| a + b).collect()
                } else {
                    want0
                };
                assert_close(&what(stem, "token 0"), &got[..rows], &want0, NMSE_DP);
                assert_close(&what(stem, "token 1"), &got[ys..ys + rows], &want1, NMSE_DP);
                assert_eq!(&got[rows..ys], &yt0[rows..ys], "{stem}: gap untouched");
            }
        }
    }
}

/// The integer-dot batched matvec (`matvec_batch_dp[_silu]`, x quantized once per step by
/// `act_q8`) for every block format: plain (stored and added to y), RMSNorm'd, and the
/// gated gate/up with the norm, at 1, 3 and 11 tokens (two token groups, the second
/// partial) and odd row counts, against the CPU model of the arithmetic
/// (`matvec_dp_cpu` per token; NMSE_DP). `act_q8` alone matches `quantize_x_q8` (int8
/// words and scales). Each token alone in a dispatch gives bit-identical rows (batch
/// invariance: the reduction order comes from the shape alone).
/// The quantized decode handoff: a gate/up writing its output's q8 records as well
/// (`q8_at`, workgroups of whole 32-row blocks) and a down reading them (`matvec_xq8`)
/// give bit for bit what the same gate/up and a down quantizing the f32 values itself
/// give; the records are the CPU packing of those values, and nothing past them is
/// written (a 64-row workgroup plan over 96 rows). Shapes: one block row of 96
/// (256-blocks: 512) and one past a tile of 8192 (8448), both with an odd hidden size for
/// down.
#[test]
fn q8_handoff_matches_quantizing_in_the_consumer_bit_for_bit() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(37);
    let eps = 1e-5;
    for dt in QUANT_DTYPES.into_iter().filter(|&dt| has_int_dot(dt)) {
        let kern = |stem: &str| matvec_kernel(stem, dt, true).unwrap();
        let k256 = dt.block_elems() == 256;
        let hidden_in = if k256 { 256 } else { 96 };
        let hidden_out = 37usize;
        let small = if k256 { 512 } else { 96 };
        // (h, plan): the forced 32 x 4 plan (the default where it has whole blocks; the
        // other formats take the handoff only then), and for 32-element blocks 16 x 4 (64
        // rows per workgroup: the last one reaches past 96 rows; a multiple of 256 rows
        // never ends inside a workgroup).
        let mut cases = vec![(small, None), (8448usize, None)];
        if !k256 {
            cases.push((96, Some(quant_tpr_field(16, 4))));
        }
        for (h, plan) in cases {
            let wg = rng.vec(h * hidden_in, 0.3);
            let wu = rng.vec(h * hidden_in, 0.3);
            let wd = rng.vec(hidden_out * h, 0.3);
            let x = rng.vec(hidden_in, 2.0);
            let nw = rng.vec(hidden_in, 1.0);
            let y0 = rng.vec(hidden_out, 1.0);
            let (g, u) = (
                qmat(&d, dt, h, hidden_in, &wg),
                qmat(&d, dt, h, hidden_in, &wu),
            );
            let down = qmat(&d, dt, hidden_out, h, &wd);
            let xb = f32_buffer(&d, "x", &x, ResourceClass::TokenScratch);
            let nb = f32_buffer(&d, "norm", &nw, ResourceClass::ReadOnlyWeight);
            // h's floats, then its records from a 256-byte boundary.
            let off = (h * 4).next_multiple_of(256);
            let rec = h / 32 * Q8_RECORD_FLOATS as usize;
            // (The buffer has 16 sentinel floats after the records.)
            let floats = off / 4 + rec;
            let tpr = plan.or(matvec_q8_handoff_tpr(dt, h as u32, hidden_in as u32)
                .or(Some(quant_tpr_field(32, 4))));
            let (h32, i32_) = (h as u32, hidden_in as u32);
            let groups = matvec_groups_dt(dt, h32, i32_, tpr);
            let gate = |q8_at: u32| {
                let hb = f32_buffer(
                    &d,
                    "h",
                    &vec![f32::NAN; floats + 16],
                    ResourceClass::TokenScratch,
                );
                let push = MatvecPush {
                    q8_at,
                    ..matvec_push(dt, h32, i32_, false, eps, tpr)
                };
                let slices = [
                    g.buf.slice(..),
                    u.buf.slice(..),
                    xb.slice(..),
                    nb.slice(..),
                    hb.slice(..),
                ];
                let got = run_one(
                    &d,
                    kern("matvec_silu_norm"),
                    groups,
                    &slices,
                    &push,
                    &hb,
                    floats + 16,
                );
                (hb, got)
            };
            let (h_ref, plain) = gate(0);
            let (h_q8, handed) = gate((off / 4) as u32);
            let what = format!("{} h {h} plan {tpr:?}", dt.name());
            let nan = f32::NAN.to_bits();
            assert!(
                handed[floats..].iter().all(|f| f.to_bits() == nan),
                "{what}: written past the records"
            );
            assert_eq!(bits(&handed[..h]), bits(&plain[..h]), "{what}: floats");
            // The records are the CPU packing of the floats (up to the GPU's division).
            assert_q8_records(&what, &handed[off / 4..], &plain[..h]);
            // down: its own quantization of the floats vs the records, adding to y0.
            let (o32, hh) = (hidden_out as u32, h as u32);
            let dgroups = matvec_groups_dt(dt, o32, hh, None);
            let run_down = |x: sluice::BufferSlice<'_>, k: &KernelDesc| {
                let yb = f32_buffer(&d, "y", &y0, ResourceClass::TokenScratch);
                let push = matvec_push(dt, o32, hh, true, 0.0, None);
                let slices = [down.buf.slice(..), x, yb.slice(..)];
                run_one(&d, k, dgroups, &slices, &push, &yb, hidden_out)
            };
            let want = run_down(h_ref.slice(0..h as u64 * 4), kern("matvec"));
            let xq8 = matvec_xq8(dt).unwrap();
            let got = run_down(h_q8.slice(off as u64..floats as u64 * 4), xq8);
            assert_eq!(bits(&got), bits(&want), "{what}: down");
            // And it is the product (up to int8 x: h is small and skewed, hence 1e-3).
            let prod: Vec<f32> = got.iter().zip(&y0).map(|(a, b)| a - b).collect();
            let exact = matvec_cpu(&down.deq, hidden_out, h, &plain[..h], None);
            assert_close(&format!("{what}: down vs f32"), &prod, &exact, 1e-3);
        }
    }
}

#[test]
fn matvec_batch_dp_matches_int_reference_and_each_token_alone() {
    use sluice_kernels::quant_dp::{matvec_dp_cpu, quantize_x_q8};
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(36);
    let eps = 1e-5;
    let act = d.pipeline(&ACT_Q8).unwrap();
    // Runs act_q8 then the batched kernel over `tokens` rows of x; returns y.
    #[allow(clippy::too_many_arguments)]
    let run = |dt: WeightDtype,
               mats: &[&Buffer],
               rows: usize,
               cols: usize,
               x: &[f32],
               norm: Option<&Buffer>,
               y0: &[f32],
               accumulate: bool|
     -> (Vec<f32>, Vec<u32>, Vec<f32>) {
        let tokens = x.len() / cols;
        let (qs, ds) = act_q8_strides(cols as u32);
        let xb = f32_buffer(&d, "x", x, ResourceClass::TokenScratch);
        let ones = vec![1.0f32; cols];
        let nw = f32_buffer(&d, "ones", &ones, ResourceClass::ReadOnlyWeight);
        let xq = d
            .create_buffer(
                "xq",
                tokens as u64 * qs as u64 * 4,
                ResourceClass::TokenScratch,
            )
            .unwrap();
        let xd = d
            .create_buffer(
                "xd",
                tokens as u64 * ds as u64 * 16,
                ResourceClass::TokenScratch,
            )
            .unwrap();
        let yb = f32_buffer(&d, "y", y0, ResourceClass::TokenScratch);
        let silu = mats.len() == 2;
        let (push, groups) = MatvecBatchDpPush::new(dt, rows as u32, cols as u32, tokens as u32);
        let push = MatvecBatchDpPush {
            accumulate: accumulate as u32,
            ..push
        };
        let k = d.pipeline(matvec_batch_dp(dt, silu).unwrap()).unwrap();
        let mut bind: Vec<_> = mats.iter().map(|m| m.slice(..)).collect();
        bind.extend([xq.slice(..), xd.slice(..), yb.slice(..)]);
        if silu {
            // The int8 output's bindings (unused: q8 0).
            bind.extend([yb.slice(..), yb.slice(..)]);
        }
        let mut enc = d.encoder().unwrap();
        enc.dispatch(
            &act,
            [tokens as u32, 1, 1],
            &[
                xb.slice(..),
                norm.unwrap_or(&nw).slice(..),
                xq.slice(..),
                xd.slice(..),
            ],
            &ActQ8Push {
                cols: cols as u32,
                tokens: tokens as u32,
                x_stride4: cols as u32 / 4,
                norm: norm.is_some() as u32,
                eps,
                xq_stride: qs,
                xd_stride: ds,
            },
        )
        .unwrap();
        enc.dispatch(&k, groups, &bind, &push).unwrap();
        enc.submit().unwrap().wait().unwrap();
        let words: Vec<u32> = xq.read(0, tokens * qs as usize).unwrap();
        let scales: Vec<f32> = xd.read(0, tokens * ds as usize * 4).unwrap();
        (yb.read(0, tokens * rows).unwrap(), words, scales)
    };
    for dt in QUANT_DTYPES.into_iter().filter(|&dt| has_int_dot(dt)) {
        for &(rows, cols) in dp_shapes(dt) {
            let wg = rng.vec(rows * cols, 0.3);
            let wu = rng.vec(rows * cols, 0.3);
            let (fg, fu) = (quantize(dt, rows, cols, &wg), quantize(dt, rows, cols, &wu));
            let (g, u) = (qmat(&d, dt, rows, cols, &wg), qmat(&d, dt, rows, cols, &wu));
            let nw = rng.vec(cols, 1.0);
            let nb = f32_buffer(&d, "norm", &nw, ResourceClass::ReadOnlyWeight);
            for tokens in [1usize, 3, 11] {
                let x = rng.vec(tokens * cols, 2.0);
                let y0 = rng.vec(tokens * rows, 1.0);
                let nan = vec![f32::NAN; tokens * rows];
                let what = |k: &str| format!("{k} {} {rows}x{cols} x{tokens}", dt.name());
                // CPU model per token: plain, normed (x * w quantized, times 1/rms), gated.
                let (mut plain, mut normed, mut gated) = (vec![], vec![], vec![]);
                let mut words = vec![];
                let mut scales = vec![];
                for xt in x.chunks_exact(cols) {
                    let q = quantize_x_q8(xt);
                    words.extend(q.q.chunks_exact(4).map(|b| {
                        u32::from_le_bytes([b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8])
                    }));
                    scales.extend(
                        q.d.iter()
                            .enumerate()
                            .flat_map(|(b, &dv)| [dv, q.sum16[2 * b], q.sum16[2 * b + 1], 0.0]),
                    );
                    plain.extend(matvec_dp_cpu(dt, rows, cols, &fg, &q));
                    let xw: Vec<f32> = xt.iter().zip(&nw).map(|(a, b)| a * b).collect();
                    let inv =
                        1.0 / (xt.iter().map(|v| v * v).sum::<f32>() / cols as f32 + eps).sqrt();
                    let qw = quantize_x_q8(&xw);
                    let gn = matvec_dp_cpu(dt, rows, cols, &fg, &qw);
                    let un = matvec_dp_cpu(dt, rows, cols, &fu, &qw);
                    normed.extend(gn.iter().map(|v| v * inv));
                    gated.extend(silu_mul_cpu(
                        &gn.iter().map(|v| v * inv).collect::<Vec<_>>(),
                        &un.iter().map(|v| v * inv).collect::<Vec<_>>(),
                    ));
                }
                let (got, gw, gs) = run(dt, &[&g.buf], rows, cols, &x, None, &nan, false);
                // act_q8 vs the CPU quantizer: the rare rounding tie aside, the same words.
                let differ = gw.iter().zip(&words).filter(|(a, b)| a != b).count();
                assert!(
                    differ * 1000 <= words.len(),
                    "{}: {differ} xq words differ",
                    what("act_q8")
                );
                // (The GPU's d = max / 127 may differ from the CPU's in the last bit, and a
                // rounding tie moves a block's sum by one step.)
                assert_close(&what("act_q8 scales"), &gs, &scales, 1e-8);
                assert_close(&what("matvec_batch_dp"), &got, &plain, NMSE_DP);
                let (got, ..) = run(dt, &[&g.buf], rows, cols, &x, None, &y0, true);
                let want: Vec<f32> = plain.iter().zip(&y0).map(|(a, b)| a + b).collect();
                assert_close(&what("matvec_batch_dp accumulate"), &got, &want, NMSE_DP);
                let (got_n, ..) = run(dt, &[&g.buf], rows, cols, &x, Some(&nb), &nan, false);
                assert_close(&what("matvec_batch_dp norm"), &got_n, &normed, NMSE_DP);
                let (got_s, ..) = run(
                    dt,
                    &[&g.buf, &u.buf],
                    rows,
                    cols,
                    &x,
                    Some(&nb),
                    &nan,
                    false,
                );
                assert_close(&what("matvec_batch_dp_silu norm"), &got_s, &gated, NMSE_DP);
                // The last token alone: its rows bit for bit.
                let t = tokens - 1;
                let xt = &x[t * cols..];
                let cases: [(&[&Buffer], &Vec<f32>, &str); 2] = [
                    (&[&g.buf, &u.buf], &got_s, "matvec_batch_dp_silu"),
                    (&[&g.buf], &got_n, "matvec_batch_dp norm"),
                ];
                for (mats, batched, kernel) in cases {
                    let alone = run(dt, mats, rows, cols, xt, Some(&nb), &nan[..rows], false).0;
                    assert!(
                        alone
                            .iter()
                            .map(|v| v.to_bits())
                            .eq(batched[t * rows..].iter().map(|v| v.to_bits())),
                        "{}: token {t} alone differs from batched",
                        what(kernel)
                    );
                }
            }
        }
    }
}

/// The gated integer-dot batched matvec's int8 output (down's input in batched engines):
/// bit for bit what `act_q8` without a norm makes of its float output, which is itself
/// unchanged; blocks past the rows and the gaps between tokens untouched.
#[test]
fn matvec_batch_dp_silu_q8_output_is_act_q8_of_its_output() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(38);
    let act = d.pipeline(&ACT_Q8).unwrap();
    let shapes = |dt: WeightDtype| {
        if dt.block_elems() == 256 {
            [(96usize, 512usize), (64, 8448)]
        } else {
            [(96, 256), (64, 8224)]
        }
    };
    for dt in QUANT_DTYPES.into_iter().filter(|&dt| has_int_dot(dt)) {
        // 96 rows: whole workgroups of 32 rows, or (Q5_K / Q6_K: 8 lanes per row group) a
        // last workgroup of 64 rows reaching past them; long rows: the default plan's 256
        // lanes capped at 16.
        for (rows, cols) in shapes(dt) {
            let plan = matvec_batch_dp_q8_plan(dt, rows as u32, cols as u32).unwrap();
            let default = matvec_batch_dp_plan(dt, rows as u32, cols as u32);
            assert_eq!(plan, default.min(16), "{}", dt.name());
            let (g, u) = (
                qmat(&d, dt, rows, cols, &rng.vec(rows * cols, 0.3)),
                qmat(&d, dt, rows, cols, &rng.vec(rows * cols, 0.3)),
            );
            for tokens in [1usize, 3, 11] {
                let what = format!("{} {rows}x{cols} x{tokens}", dt.name());
                let x = rng.vec(tokens * cols, 2.0);
                let (qs, ds) = act_q8_strides(cols as u32);
                let (hq_s, hd_s) = act_q8_strides(rows as u32);
                let xb = f32_buffer(&d, "x", &x, ResourceClass::TokenScratch);
                let one = f32_buffer(&d, "ones", &vec![1.0; cols], ResourceClass::ReadOnlyWeight);
                let xq = u32_buffer(
                    &d,
                    "xq",
                    &vec![0; tokens * qs as usize],
                    ResourceClass::TokenScratch,
                );
                let xd = u32_buffer(
                    &d,
                    "xd",
                    &vec![0; tokens * ds as usize * 4],
                    ResourceClass::TokenScratch,
                );
                let (nq, nd) = (
                    tokens * (hq_s + 1) as usize,
                    tokens * (hd_s + 1) as usize * 4,
                );
                let run = |q8: bool, plan: u32| -> (Vec<u32>, Vec<u32>, Vec<u32>) {
                    let yb = u32_buffer(
                        &d,
                        "y",
                        &vec![!0; tokens * rows],
                        ResourceClass::TokenScratch,
                    );
                    let hq = u32_buffer(&d, "hq", &vec![!0; nq], ResourceClass::TokenScratch);
                    let hd = u32_buffer(&d, "hd", &vec![!0; nd], ResourceClass::TokenScratch);
                    let (push, groups) = MatvecBatchDpPush::with_plan(
                        dt,
                        rows as u32,
                        cols as u32,
                        tokens as u32,
                        plan,
                    );
                    let push = MatvecBatchDpPush {
                        q8: q8 as u32,
                        q8_words: hq_s + 1,
                        q8_blocks: hd_s + 1,
                        ..push
                    };
                    let k = d.pipeline(matvec_batch_dp(dt, true).unwrap()).unwrap();
                    let mut enc = d.encoder().unwrap();
                    enc.dispatch(
                        &act,
                        [tokens as u32, 1, 1],
                        &[xb.slice(..), one.slice(..), xq.slice(..), xd.slice(..)],
                        &ActQ8Push {
                            cols: cols as u32,
                            tokens: tokens as u32,
                            x_stride4: cols as u32 / 4,
                            norm: 0,
                            eps: 0.0,
                            xq_stride: qs,
                            xd_stride: ds,
                        },
                    )
                    .unwrap();
                    let bind = [
                        g.buf.slice(..),
                        u.buf.slice(..),
                        xq.slice(..),
                        xd.slice(..),
                        yb.slice(..),
                        hq.slice(..),
                        hd.slice(..),
                    ];
                    enc.dispatch(&k, groups, &bind, &push).unwrap();
                    enc.submit().unwrap().wait().unwrap();
                    (
                        yb.read(0, tokens * rows).unwrap(),
                        hq.read(0, nq).unwrap(),
                        hd.read(0, nd).unwrap(),
                    )
                };
                let (y_off, ..) = run(false, plan);
                let (y, gq, gd) = run(true, plan);
                assert_eq!(y, y_off, "{what}: y with the q8 output");
                // The capped plan sums in another order than the default one: close.
                let (y_default, ..) = run(false, default);
                let f = |v: &[u32]| v.iter().map(|&b| f32::from_bits(b)).collect::<Vec<_>>();
                assert_close(&what, &f(&y), &f(&y_default), 1e-10);
                // act_q8 of y, on the same device.
                let yf: Vec<f32> = y.iter().map(|&b| f32::from_bits(b)).collect();
                let want = act_q8_rows(&d, &yf, rows as u32, tokens as u32);
                let want = (&want.0[..], &want.1[..]);
                assert_q8_rows(&what, (&gq, &gd), want, rows as u32, tokens);
            }
        }
    }
    assert_eq!(matvec_batch_dp_q8_plan(WeightDtype::Q4K, 100, 512), None);
}

/// `matvec_norm_two` (q|k of one block format and v of another in one dispatch) writes
/// each matrix's rows bit for bit as `matvec_norm` of that format alone does with the same
/// plan, the second matrix's at its y offset, nothing else of y; rows not a multiple of a
/// workgroup's, several plans, and the integer reference for the second matrix.
#[test]
fn two_format_norm_matvec_matches_each_format_alone() {
    use sluice_kernels::quant_dp::{matvec_dp_cpu, quantize_x_q8};
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    assert!(
        d.info().int_dot,
        "the test device (lavapipe) has integer dot products"
    );
    let mut rng = Rng::new(45);
    let (a_rows, b_rows, cols) = (37usize, 21usize, 512usize);
    let b_y = a_rows.next_multiple_of(16);
    let eps = 1e-5;
    for (a, b) in [
        (WeightDtype::Q4K, WeightDtype::Q6K),
        (WeightDtype::Q5K, WeightDtype::Q6K),
    ] {
        let wb = rng.vec(b_rows * cols, 0.5);
        let ga = qmat(&d, a, a_rows, cols, &rng.vec(a_rows * cols, 0.5));
        let gb = qmat(&d, b, b_rows, cols, &wb);
        let x = rng.vec(cols, 1.0);
        let nw: Vec<f32> = rng.vec(cols, 0.5).iter().map(|v| 1.0 + v).collect();
        let xb = f32_buffer(&d, "x", &x, ResourceClass::TokenScratch);
        let nb = f32_buffer(&d, "norm", &nw, ResourceClass::ReadOnlyWeight);
        let kern = matvec_norm_two(a, b).expect("a two-format kernel for the pair");
        let n = b_y + b_rows + 3;
        let nan = vec![f32::NAN; n];
        let plans = [
            None,
            Some(quant_tpr_field(64, 4)),
            Some(quant_tpr_field(128, 2)),
            Some(quant_tpr_field(32, 1)),
        ];
        for tpr in plans {
            let what = format!("matvec_norm_two {}+{} tpr {tpr:?}", a.name(), b.name());
            let (push, groups) = matvec_norm_two_push(
                a,
                a_rows as u32,
                b,
                b_rows as u32,
                b_y as u32,
                cols as u32,
                eps,
                tpr,
            )
            .unwrap();
            let yb = f32_buffer(&d, "y", &nan, ResourceClass::TokenScratch);
            let got = run_one(
                &d,
                kern,
                groups,
                &[
                    ga.buf.slice(..),
                    gb.buf.slice(..),
                    xb.slice(..),
                    nb.slice(..),
                    yb.slice(..),
                ],
                &push,
                &yb,
                n,
            );
            // Each format alone, with the first matrix's plan.
            let plan = Some(push.threads_per_row);
            let alone = |dt: WeightDtype, m: &QMat, rows: usize| {
                let yb = f32_buffer(&d, "y", &nan[..rows], ResourceClass::TokenScratch);
                run_one(
                    &d,
                    matvec_kernel("matvec_norm", dt, true).unwrap(),
                    matvec_groups_dt(dt, rows as u32, cols as u32, plan),
                    &[m.buf.slice(..), xb.slice(..), nb.slice(..), yb.slice(..)],
                    &matvec_push(dt, rows as u32, cols as u32, false, eps, plan),
                    &yb,
                    rows,
                )
            };
            assert_eq!(
                bits(&got[..a_rows]),
                bits(&alone(a, &ga, a_rows)),
                "{what}: first"
            );
            assert_eq!(
                bits(&got[b_y..b_y + b_rows]),
                bits(&alone(b, &gb, b_rows)),
                "{what}: second"
            );
            let untouched = got[a_rows..b_y].iter().chain(&got[b_y + b_rows..]);
            assert!(
                untouched.into_iter().all(|v| v.is_nan()),
                "{what}: wrote outside its rows"
            );
            // The second matrix against the integer model of its format.
            let xw: Vec<f32> = x.iter().zip(&nw).map(|(a, b)| a * b).collect();
            let inv = 1.0 / (x.iter().map(|v| v * v).sum::<f32>() / cols as f32 + eps).sqrt();
            let fb = quantize(b, b_rows, cols, &wb);
            let want: Vec<f32> = matvec_dp_cpu(b, b_rows, cols, &fb, &quantize_x_q8(&xw))
                .iter()
                .map(|v| v * inv)
                .collect();
            assert_close(&what, &got[b_y..b_y + b_rows], &want, NMSE_DP);
        }
        // Pairs without a kernel.
        assert!(matvec_norm_two(WeightDtype::Q4K, WeightDtype::Q8_0).is_none());
    }
}
