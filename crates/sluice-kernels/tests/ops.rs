//! Every LLM kernel against its CPU reference on random data (deterministic PRNG), with
//! synchronization validation on (each test holds a `ValidationGuard`).
//!
//! Metric: NMSE = sum((gpu - ref)^2) / sum(ref^2). Bound 1e-6 for every path: f16/bf16
//! weights are compared with a reference built from the same rounded weights, and the
//! f16 KV cache with a reference built from f16-rounded k/v, so only f32 arithmetic
//! differences (summation order, exp/sin/cos/rsqrt accuracy) remain.

use sluice::testing::{test_device, ValidationGuard};
use sluice::{Buffer, Device, ResourceClass};
use sluice_kernels::*;

mod common;
use common::*;

#[track_caller]
fn assert_close(what: &str, gpu: &[f32], reference: &[f32]) {
    assert_nmse(what, gpu, reference, NMSE_MAX);
}

const NMSE_MAX: f64 = 1e-6;
const DTYPES: [WeightDtype; 3] = [WeightDtype::F16, WeightDtype::Bf16, WeightDtype::F32];

fn params_buffer(d: &Device, token: u32, pos: u32) -> Buffer {
    u32_buffer(
        d,
        "params",
        &[token, pos, pos + 1, 0],
        ResourceClass::Generic,
    )
}

fn rounded(dtype: WeightDtype, w: &[f32]) -> Vec<f32> {
    w.iter().map(|&v| round_to(dtype, v)).collect()
}

#[test]
fn packing_layout_and_helpers() {
    let w: Vec<f32> = (0..3 * 5).map(|i| i as f32 + 0.5).collect();
    for dtype in DTYPES {
        let bytes = pack_weights(dtype, 3, 5, &w);
        assert_eq!(bytes.len(), 3 * 8 * dtype.bytes());
        let back = unpack_to_f32(dtype, &bytes);
        for r in 0..3 {
            assert_eq!(&back[r * 8..r * 8 + 5], &w[r * 5..r * 5 + 5], "{dtype:?}");
            assert_eq!(&back[r * 8 + 5..r * 8 + 8], &[0.0; 3], "{dtype:?} padding");
        }
    }
    assert_eq!(round_to(WeightDtype::Bf16, 1.0 + 1.0 / 256.0), 1.0); // halfway: to even
    assert_eq!(round_to(WeightDtype::F16, 1.0 + 1.0 / 4096.0), 1.0);
    assert_eq!(
        unpack_f16_pairs(&pack_f16_pairs(&[1.5, -2.0, 0.25])),
        vec![1.5, -2.0, 0.25, 0.0]
    );
    assert_eq!(matvec_groups(37, 100), [10, 1, 1]);
    assert_eq!(matvec_groups(37, 8192), [10, 1, 1]); // 64 threads per row at any length
    assert_eq!(matvec_groups_for(37, 128), [19, 1, 1]); // 2 rows a group
    assert_eq!(matvec_groups_for(37, 256), [37, 1, 1]);
    assert_eq!(matvec_groups(4 * 65535, 8), [65535, 1, 1]);
    let [x, y, z] = matvec_groups(4 * 65535 + 1, 8);
    assert!(x <= 65535 && y == 2 && z == 1 && x * y >= 65536);
    assert_eq!(embed_groups(100), [1, 1, 1]);
    assert_eq!(embed_groups(8 * 64 + 1), [2, 1, 1]);
    // Positions per split and the splits a capacity needs: short contexts take the small
    // chunk (32, or 128 above 16 heads; doubled until eight splits cover the context), long
    // ones the push field's.
    assert_eq!(attention_splits(320, 64, 16), 8);
    assert_eq!(attention_splits(320, 64, 32), 5);
    assert_eq!(attention_splits(4096, 256, 16), 16);
    assert_eq!(attention_splits(512, 256, 16), 8);
    assert_eq!(attention_splits(100, 256, 16), 4);
    assert_eq!(attention_splits(100, 256, 32), 1);
    for (seq, want) in [
        (1, 32),
        (256, 32),
        (257, 64),
        (1024, 128),
        (1025, 256),
        (2048, 256),
    ] {
        assert_eq!(attention_chunk_for(seq, 256, 16, 16), want, "seq {seq}");
    }
    for (seq, want) in [(1, 128), (128, 128), (1024, 128), (1025, 256)] {
        assert_eq!(
            attention_chunk_for(seq, 256, 32, 16),
            want,
            "seq {seq}, 32 heads"
        );
    }
    // A dispatch of fewer splits keeps the chunk that covers the context in them.
    assert_eq!(attention_chunk_for(100, 128, 16, 1), 128);
    assert_eq!(attention_chunk_for(5000, 256, 16, 20), 256);
    assert_eq!(attention_chunk_for(100, 16, 16, 7), 16);
    for chunk in [1, 16, 64, 100, 256] {
        for heads in [1, 16, 17, 32] {
            let splits = attention_splits(4096, chunk, heads);
            for seq in 1..=4096u32 {
                let c = attention_chunk_for(seq, chunk, heads, splits);
                assert!(seq.div_ceil(c) <= splits);
            }
        }
    }
    assert_eq!(argmax_cpu(&[1.0, f32::NAN, 3.0, 3.0]), (2, 3.0));
}

#[test]
fn embed_reads_token_from_params() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(1);
    let (vocab, cols) = (37usize, 100usize);
    let table = rng.vec(vocab * cols, 1.0);
    for dtype in DTYPES {
        let k = d.pipeline(embed(dtype)).unwrap();
        let w = weight_buffer(&d, dtype, vocab, cols, &table);
        let x = f32_buffer(&d, "x", &vec![f32::NAN; cols], ResourceClass::TokenScratch);
        let want = rounded(dtype, &table);
        for token in [29u32, 0, 36] {
            let params = params_buffer(&d, token, 3);
            let mut enc = d.encoder().unwrap();
            let push = EmbedPush {
                cols: cols as u32,
                stride8: stride8(cols as u32),
                prefill: 0,
                x_stride: 0,
                first: 0,
                last: 1,
            };
            enc.dispatch(
                &k,
                embed_groups(cols as u32),
                &[params.slice(..), w.slice(..), x.slice(..)],
                &push,
            )
            .unwrap();
            enc.submit().unwrap().wait().unwrap();
            let got: Vec<f32> = x.read(0, cols).unwrap();
            assert_eq!(
                got,
                embed_cpu(&want, cols, token),
                "{dtype:?} token {token}"
            );
        }
    }
}

/// A table split over two bindings (rows 0..20 and 20..37, as the loader splits a table
/// larger than the device binds at once): one dispatch per part (`EmbedPush::part`), in
/// either order, writes each token's row exactly as the whole table does, a token past the
/// table zeros (its last part), and a part alone leaves the other part's tokens untouched.
#[test]
fn embed_of_a_table_split_over_bindings() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(2);
    let (vocab, cols, split) = (37usize, 100usize, 20usize);
    let table = rng.vec(vocab * cols, 1.0);
    for dtype in DTYPES {
        let k = d.pipeline(embed(dtype)).unwrap();
        let a = weight_buffer(&d, dtype, split, cols, &table[..split * cols]);
        let b = weight_buffer(&d, dtype, vocab - split, cols, &table[split * cols..]);
        let want = rounded(dtype, &table);
        let whole = embed_push(dtype, cols as u32, false, 0);
        let parts = [
            (&a, whole.part(0, false)),
            (&b, whole.part(split as u32, true)),
        ];
        let run = |token: u32, order: &[usize]| -> Vec<f32> {
            let x = f32_buffer(&d, "x", &vec![f32::NAN; cols], ResourceClass::TokenScratch);
            let params = params_buffer(&d, token, 3);
            let mut enc = d.encoder().unwrap();
            for &i in order {
                let (w, push) = &parts[i];
                enc.dispatch(
                    &k,
                    embed_groups(cols as u32),
                    &[params.slice(..), w.slice(..), x.slice(..)],
                    push,
                )
                .unwrap();
            }
            enc.submit().unwrap().wait().unwrap();
            x.read(0, cols).unwrap()
        };
        for token in [0u32, 7, 19, 20, 29, 36, 37, 50] {
            let expect = if (token as usize) < vocab {
                embed_cpu(&want, cols, token)
            } else {
                vec![0.0; cols]
            };
            for order in [[0, 1], [1, 0]] {
                assert_eq!(
                    run(token, &order),
                    expect,
                    "{dtype:?} token {token} {order:?}"
                );
            }
            // The part that does not hold the token writes nothing.
            let other = usize::from((token as usize) < split);
            assert!(
                run(token, &[other]).iter().all(|v| v.is_nan()),
                "{dtype:?} token {token}: part {other} wrote"
            );
        }
    }
}

/// One matvec dispatch; x is bound with `stride8 * 8` floats, zero beyond cols (the
/// kernel's contract), `y0` is y's previous content.
#[allow(clippy::too_many_arguments)]
fn run_matvec(
    d: &Device,
    dtype: WeightDtype,
    rows: usize,
    cols: usize,
    w: &[f32],
    x: &[f32],
    y0: &[f32],
    accumulate: bool,
) -> Vec<f32> {
    let k = d.pipeline(matvec(dtype)).unwrap();
    let wb = weight_buffer(d, dtype, rows, cols, w);
    let xs = padded(x);
    let xb = f32_buffer(d, "x", &xs, ResourceClass::TokenScratch);
    let yb = f32_buffer(d, "y", y0, ResourceClass::TokenScratch);
    let push = mv_push(rows, cols, accumulate, 0.0);
    let mut enc = d.encoder().unwrap();
    enc.dispatch(
        &k,
        matvec_groups(rows as u32, cols as u32),
        &[wb.slice(..), xb.slice(..), yb.slice(..)],
        &push,
    )
    .unwrap();
    enc.submit().unwrap().wait().unwrap();
    yb.read(0, rows).unwrap()
}

#[test]
fn matvec_matches_reference() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(2);
    // Odd sizes: rows not a multiple of 4, cols not a multiple of 8 / 64; one row long
    // enough for the 4-chunk unrolled loop (cols 4100 = 513 chunks > 4 * 64).
    for (rows, cols) in [(37, 100), (37, 333), (6, 1000), (13, 4100), (64, 8), (1, 3)] {
        let w = rng.vec(rows * cols, 1.0);
        let x = rng.vec(cols, 1.0);
        let y0 = rng.vec(rows, 1.0);
        for dtype in DTYPES {
            let wr = rounded(dtype, &w);
            // y overwritten (its NaNs must not leak through).
            let got = run_matvec(&d, dtype, rows, cols, &w, &x, &vec![f32::NAN; rows], false);
            assert_close(
                &format!("matvec {dtype:?} {rows}x{cols}"),
                &got,
                &matvec_cpu(&wr, rows, cols, &x, None),
            );
            // Accumulate onto y0 (the fused residual add).
            let got = run_matvec(&d, dtype, rows, cols, &w, &x, &y0, true);
            let want = matvec_cpu(&wr, rows, cols, &x, Some(&y0));
            assert_close(&format!("matvec acc {dtype:?} {rows}x{cols}"), &got, &want);
        }
    }
}

#[test]
fn matvec_covers_a_2d_grid() {
    // More than 65535 row blocks: the dispatch becomes 2-D.
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(3);
    let (rows, cols) = (4 * 65535 + 7, 8);
    assert!(matvec_groups(rows as u32, cols as u32)[1] > 1);
    let w = rng.vec(rows * cols, 1.0);
    let x = rng.vec(cols, 1.0);
    let dtype = WeightDtype::F16;
    let got = run_matvec(&d, dtype, rows, cols, &w, &x, &vec![f32::NAN; rows], false);
    assert_close(
        "matvec 2-D",
        &got,
        &matvec_cpu(&rounded(dtype, &w), rows, cols, &x, None),
    );
}

#[test]
fn matvec_silu_matches_reference() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(4);
    for (rows, cols) in [(37, 100), (21, 333), (9, 1000)] {
        let wg = rng.vec(rows * cols, 0.2);
        let wu = rng.vec(rows * cols, 0.2);
        let x = rng.vec(cols, 1.0);
        for dtype in DTYPES {
            let k = d.pipeline(matvec_silu(dtype)).unwrap();
            let gb = weight_buffer(&d, dtype, rows, cols, &wg);
            let ub = weight_buffer(&d, dtype, rows, cols, &wu);
            let xb = f32_buffer(&d, "x", &padded(&x), ResourceClass::TokenScratch);
            let yb = f32_buffer(&d, "y", &vec![f32::NAN; rows], ResourceClass::TokenScratch);
            let push = mv_push(rows, cols, true, 0.0);
            let mut enc = d.encoder().unwrap();
            let slices = [gb.slice(..), ub.slice(..), xb.slice(..), yb.slice(..)];
            enc.dispatch(&k, matvec_groups(rows as u32, cols as u32), &slices, &push)
                .unwrap();
            enc.submit().unwrap().wait().unwrap();
            let got: Vec<f32> = yb.read(0, rows).unwrap();
            let want = matvec_silu_cpu(&rounded(dtype, &wg), &rounded(dtype, &wu), rows, cols, &x);
            assert_close(&format!("matvec_silu {dtype:?} {rows}x{cols}"), &got, &want);
        }
    }
}

/// `v` zero-padded to whole 8-element chunks (the matvec family's x contract).
fn padded(v: &[f32]) -> Vec<f32> {
    let mut p = v.to_vec();
    p.resize(v.len().div_ceil(8) * 8, 0.0);
    p
}

fn mv_push(rows: usize, cols: usize, accumulate: bool, eps: f32) -> MatvecPush {
    MatvecPush {
        rows: rows as u32,
        cols: cols as u32,
        stride8: stride8(cols as u32),
        accumulate: accumulate as u32,
        eps,
        threads_per_row: 0,
        x_stride4: 0,
        y_stride: 0,
        ..Default::default()
    }
}

#[test]
fn fused_norm_matvecs_match_norm_then_matvec() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(14);
    let eps = 1e-6;
    for (rows, cols) in [(37, 100), (13, 4100), (9, 1000)] {
        let w = rng.vec(rows * cols, 0.3);
        let w2 = rng.vec(rows * cols, 0.3);
        let x = rng.vec(cols, 2.0);
        let nw = rng.vec(cols, 1.0);
        let y0 = rng.vec(rows, 1.0);
        let xn = rmsnorm_cpu(&x, &nw, cols, eps);
        for dtype in DTYPES {
            let (wr, w2r) = (rounded(dtype, &w), rounded(dtype, &w2));
            let wb = weight_buffer(&d, dtype, rows, cols, &w);
            let w2b = weight_buffer(&d, dtype, rows, cols, &w2);
            let xb = f32_buffer(&d, "x", &padded(&x), ResourceClass::TokenScratch);
            let nb = f32_buffer(&d, "norm", &padded(&nw), ResourceClass::ReadOnlyWeight);
            let yb = f32_buffer(&d, "y", &y0, ResourceClass::TokenScratch);
            let y2 = f32_buffer(&d, "y2", &vec![f32::NAN; rows], ResourceClass::TokenScratch);
            let groups = matvec_groups(rows as u32, cols as u32);
            let mut enc = d.encoder().unwrap();
            let k = d.pipeline(matvec_norm(dtype)).unwrap();
            enc.dispatch(
                &k,
                groups,
                &[wb.slice(..), xb.slice(..), nb.slice(..), yb.slice(..)],
                &mv_push(rows, cols, true, eps),
            )
            .unwrap();
            let k = d.pipeline(matvec_silu_norm(dtype)).unwrap();
            let slices = [
                wb.slice(..),
                w2b.slice(..),
                xb.slice(..),
                nb.slice(..),
                y2.slice(..),
            ];
            enc.dispatch(&k, groups, &slices, &mv_push(rows, cols, false, eps))
                .unwrap();
            enc.submit().unwrap().wait().unwrap();
            let got: Vec<f32> = yb.read(0, rows).unwrap();
            let want = matvec_cpu(&wr, rows, cols, &xn, Some(&y0));
            assert_close(&format!("matvec_norm {dtype:?} {rows}x{cols}"), &got, &want);
            // The LM head's kernel on a grid smaller than the matrix (matvec_resident_grid):
            // 2 workgroups over the blocks of 4 rows (the family's 64 threads per row) or
            // of 8 (the head plan's 32, or the subgroup), each taking every other; a row
            // per subgroup (tpr = the subgroup size) writes its row without shared memory.
            let few = [2, 1, 1];
            assert!(groups[0] > 2, "{groups:?}");
            let sg = d.info().subgroup_size;
            let head_tpr = MATVEC_HEAD_FLOAT_THREADS_PER_ROW.max(sg);
            for tpr in [0, head_tpr, sg] {
                let yb = f32_buffer(&d, "y", &y0, ResourceClass::TokenScratch);
                let mut enc = d.encoder().unwrap();
                let head = matvec_kernel("matvec_norm_head", dtype, false).unwrap();
                let k = d.pipeline(head).unwrap();
                let push = MatvecPush {
                    threads_per_row: tpr,
                    ..mv_push(rows, cols, true, eps)
                };
                enc.dispatch(
                    &k,
                    few,
                    &[wb.slice(..), xb.slice(..), nb.slice(..), yb.slice(..)],
                    &push,
                )
                .unwrap();
                enc.submit().unwrap().wait().unwrap();
                let got: Vec<f32> = yb.read(0, rows).unwrap();
                assert_close(
                    &format!(
                        "matvec_norm_head {dtype:?} {rows}x{cols} on 2 workgroups, {tpr} threads per row"
                    ),
                    &got,
                    &want,
                );
            }
            let got: Vec<f32> = y2.read(0, rows).unwrap();
            let want = matvec_silu_cpu(&wr, &w2r, rows, cols, &xn);
            assert_close(
                &format!("matvec_silu_norm {dtype:?} {rows}x{cols}"),
                &got,
                &want,
            );
        }
    }
}

#[test]
fn rmsnorm_matches_reference() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let k = d.pipeline(&RMSNORM).unwrap();
    let mut rng = Rng::new(5);
    for (n, rows) in [(1000usize, 3usize), (37, 1), (2560, 2)] {
        let x = rng.vec(n * rows, 3.0);
        let w = rng.vec(n, 1.0);
        let xb = f32_buffer(&d, "x", &x, ResourceClass::TokenScratch);
        let wb = f32_buffer(&d, "w", &w, ResourceClass::ReadOnlyWeight);
        let yb = f32_buffer(
            &d,
            "y",
            &vec![f32::NAN; n * rows],
            ResourceClass::TokenScratch,
        );
        let push = RmsNormPush {
            n: n as u32,
            rows: rows as u32,
            eps: 1e-6,
            stride: 0,
        };
        let mut enc = d.encoder().unwrap();
        enc.dispatch(
            &k,
            [rows as u32, 1, 1],
            &[xb.slice(..), wb.slice(..), yb.slice(..)],
            &push,
        )
        .unwrap();
        enc.submit().unwrap().wait().unwrap();
        let got: Vec<f32> = yb.read(0, n * rows).unwrap();
        assert_close(
            &format!("rmsnorm n {n} rows {rows}"),
            &got,
            &rmsnorm_cpu(&x, &w, n, 1e-6),
        );
    }
}

#[test]
fn qk_norm_rope_matches_reference_and_appends_kv() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let k = d.pipeline(&QK_NORM_ROPE).unwrap();
    let mut rng = Rng::new(6);
    let capacity = 320u32;
    for (heads, kv_heads, hd, flags, pos, theta) in [
        (4u32, 2u32, 64u32, ROPE_NORM, 17u32, 1.0e6f32),
        (6, 6, 128, 0, 299, 10000.0),
        (4, 2, 64, 0, 0, 1.0e6),
        (4, 2, 64, ROPE_BIAS, 37, 1.0e6),
        (2, 1, 64, ROPE_FREQ, 211, 5.0e5),
        (4, 2, 32, ROPE_NORM | ROPE_BIAS | ROPE_FREQ, 5, 1.0e4),
    ] {
        let (nq, nk) = ((heads * hd) as usize, (kv_heads * hd) as usize);
        let q = rng.vec(nq, 2.0);
        let kk = rng.vec(nk, 2.0);
        let v = rng.vec(nk, 2.0);
        let qn = rng.vec(hd as usize, 1.5);
        let kn = rng.vec(hd as usize, 1.5);
        let bias = rng.vec(nq + 2 * nk, 2.0);
        let freq: Vec<f32> = rng
            .vec(hd as usize / 2, 0.5)
            .iter()
            .map(|f| 0.75 + f)
            .collect();
        let cache_words = (kv_heads * capacity * hd / 2) as usize;
        let sentinel = 0x7E00_7E00u32; // f16 NaN pairs: anything else written is an error
        let p = QkRopePush {
            heads,
            kv_heads,
            head_dim: hd,
            capacity,
            flags,
            eps: 1e-6,
            theta,
            token_stride: 0,
        };
        let params = params_buffer(&d, 0, pos);
        let qb = f32_buffer(&d, "q", &q, ResourceClass::TokenScratch);
        let kb = f32_buffer(&d, "k", &kk, ResourceClass::TokenScratch);
        let vb = f32_buffer(&d, "v", &v, ResourceClass::TokenScratch);
        let qnb = f32_buffer(&d, "qn", &qn, ResourceClass::ReadOnlyWeight);
        let knb = f32_buffer(&d, "kn", &kn, ResourceClass::ReadOnlyWeight);
        let biasb = f32_buffer(&d, "bias", &bias, ResourceClass::ReadOnlyWeight);
        let freqb = f32_buffer(&d, "freq", &freq, ResourceClass::ReadOnlyWeight);
        let kc = u32_buffer(
            &d,
            "kc",
            &vec![sentinel; cache_words],
            ResourceClass::AppendOnlyKv,
        );
        let vc = u32_buffer(
            &d,
            "vc",
            &vec![sentinel; cache_words],
            ResourceClass::AppendOnlyKv,
        );
        let mut enc = d.encoder().unwrap();
        let slices = [
            params.slice(..),
            qb.slice(..),
            kb.slice(..),
            vb.slice(..),
            qnb.slice(..),
            knb.slice(..),
            kc.slice(..),
            vc.slice(..),
            biasb.slice(..),
            freqb.slice(..),
        ];
        enc.dispatch(&k, [heads + kv_heads, 1, 1], &slices, &p)
            .unwrap();
        enc.submit().unwrap().wait().unwrap();

        let (mut q_ref, mut k_ref, mut v_ref) = (q.clone(), kk.clone(), v.clone());
        let extras = RopeExtras {
            bias: &bias,
            freq: &freq,
        };
        qk_norm_rope_cpu(
            &p, pos, &mut q_ref, &mut k_ref, &mut v_ref, &qn, &kn, extras,
        );
        let what = format!("heads {heads}/{kv_heads} hd {hd} flags {flags} pos {pos}");
        assert_close(
            &format!("q {what}"),
            &qb.read::<f32>(0, nq).unwrap(),
            &q_ref,
        );
        let kc_words: Vec<u32> = kc.read(0, cache_words).unwrap();
        let vc_words: Vec<u32> = vc.read(0, cache_words).unwrap();
        let row = |j: u32| {
            ((j * capacity + pos) * hd / 2) as usize..((j * capacity + pos + 1) * hd / 2) as usize
        };
        let (mut k_got, mut v_got) = (Vec::new(), Vec::new());
        for j in 0..kv_heads {
            k_got.extend(unpack_f16_pairs(&kc_words[row(j)]));
            v_got.extend(unpack_f16_pairs(&vc_words[row(j)]));
        }
        let k_want: Vec<f32> = k_ref
            .iter()
            .map(|&x| round_to(WeightDtype::F16, x))
            .collect();
        let v_want: Vec<f32> = v_ref
            .iter()
            .map(|&x| round_to(WeightDtype::F16, x))
            .collect();
        assert_close(&format!("kcache {what}"), &k_got, &k_want);
        assert_eq!(v_got, v_want, "vcache {what}");
        // Nothing outside the appended rows was touched.
        for (name, words) in [("kcache", &kc_words), ("vcache", &vc_words)] {
            let touched: usize = (0..kv_heads).map(|j| row(j).len()).sum();
            let untouched = words.iter().filter(|&&w| w == sentinel).count();
            assert_eq!(
                untouched,
                cache_words - touched,
                "{name} {what}: writes outside [j, pos]"
            );
        }
    }
}

#[test]
fn attention_split_and_combine_match_reference() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let split = d.pipeline(&ATTENTION_SPLIT).unwrap();
    let combine = d.pipeline(&ATTENTION_COMBINE).unwrap();
    let mut rng = Rng::new(7);
    // Chunk 64 or 256 at most: the kernels take fewer positions per split at short
    // contexts (attention_chunk_for), so one to eight splits and the combine.
    for (capacity, chunk) in [(320u32, 64u32), (320, 256)] {
        // 20 heads: the many-heads minimum chunk (one split up to 128 positions).
        for (heads, kv_heads, hd) in [(4u32, 2u32, 64u32), (6, 6, 128), (20, 4, 64)] {
            let splits = attention_splits(capacity, chunk, heads);
            // The whole cache is random: positions >= seq_len are garbage the kernel must skip.
            let cache_len = (kv_heads * capacity * hd) as usize;
            let (kc, vc, kc_f, vc_f) = random_kv_caches(&d, &mut rng, cache_len);
            let p = AttnPush {
                heads,
                kv_heads,
                head_dim: hd,
                capacity,
                chunk,
                splits,
                scale: 1.0 / (hd as f32).sqrt(),
                q_stride: 0,
            };
            // Ticket counters: zero at creation; every dispatch must leave them zero, so one
            // buffer serves all the steps below.
            let counters = u32_buffer(
                &d,
                "counters",
                &vec![0u32; attention_counter_words(heads, 1) as usize],
                ResourceClass::TokenScratch,
            );
            for seq_len in [1u32, 17, 64, 100, 300, 256, 257] {
                let q = rng.vec((heads * hd) as usize, 3.0);
                let qb = f32_buffer(&d, "q", &q, ResourceClass::TokenScratch);
                let params = params_buffer(&d, 0, seq_len - 1);
                let part_len = (heads * splits * (hd + 2)) as usize;
                let part = f32_buffer(
                    &d,
                    "partial",
                    &vec![f32::NAN; part_len],
                    ResourceClass::TokenScratch,
                );
                let nan_out = || {
                    f32_buffer(
                        &d,
                        "out",
                        &vec![f32::NAN; (heads * hd) as usize],
                        ResourceClass::TokenScratch,
                    )
                };
                let (out, out2) = (nan_out(), nan_out());
                let mut enc = d.encoder().unwrap();
                let s = [
                    params.slice(..),
                    qb.slice(..),
                    kc.slice(..),
                    vc.slice(..),
                    part.slice(..),
                    counters.slice(..),
                    out.slice(..),
                ];
                enc.dispatch(&split, [splits, heads, 1], &s, &p).unwrap();
                // The separate combine over the same partials: the folded one must match it
                // bit for bit.
                enc.dispatch(
                    &combine,
                    [heads, 1, 1],
                    &[params.slice(..), part.slice(..), out2.slice(..)],
                    &p,
                )
                .unwrap();
                enc.submit().unwrap().wait().unwrap();

                let what = format!("heads {heads}/{kv_heads} hd {hd} seq {seq_len} chunk {chunk}");
                let got_part: Vec<f32> = part.read(0, part_len).unwrap();
                let want_part = attention_partials_cpu(&p, seq_len, &q, &kc_f, &vc_f);
                let used = seq_len.div_ceil(attention_chunk_for(seq_len, chunk, heads, splits));
                for (i, (g, w)) in got_part
                    .chunks(hd as usize + 2)
                    .zip(want_part.chunks(hd as usize + 2))
                    .enumerate()
                {
                    if i as u32 % splits >= used {
                        // Empty splits return at once: nothing written.
                        assert!(g.iter().all(|x| x.is_nan()), "empty split {i} {what}");
                    } else {
                        assert!(
                            (g[0] - w[0]).abs() <= 1e-5 * w[0].abs().max(1.0),
                            "m of split {i} {what}: {} vs {}",
                            g[0],
                            w[0]
                        );
                        assert_close(&format!("l, o of split {i} {what}"), &g[1..], &w[1..]);
                    }
                }
                let got: Vec<f32> = out.read(0, (heads * hd) as usize).unwrap();
                assert_close(
                    &format!("attention {what}"),
                    &got,
                    &attention_cpu(&p, seq_len, &q, &kc_f, &vc_f),
                );
                let two_pass: Vec<f32> = out2.read(0, (heads * hd) as usize).unwrap();
                assert_eq!(bits(&got), bits(&two_pass), "one pass vs two {what}");
                assert_eq!(
                    counters.read::<u32>(0, heads as usize).unwrap(),
                    vec![0; heads as usize],
                    "counters left zero {what}"
                );
            }
        }
    }
}

#[test]
fn argmax_is_exact_with_ties_and_nan() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    // argmax, and argmax_advance (the same pick, then the step's end).
    let kernels = [
        d.pipeline(&ARGMAX).unwrap(),
        d.pipeline(&ARGMAX_ADVANCE).unwrap(),
    ];
    let mut rng = Rng::new(8);
    let n = 151_936usize;
    let base = rng.vec(n, 10.0);
    let mut cases: Vec<(&str, Vec<f32>)> = vec![("random", base.clone())];
    let mut tie = base.clone();
    tie[90_001] = 20.0;
    tie[1_234] = 20.0; // lower index wins
    tie[150_000] = 20.0;
    cases.push(("tie", tie));
    let mut nan = base.clone();
    nan[5] = f32::NAN;
    nan[77_777] = 15.0;
    nan[n - 1] = f32::NAN;
    cases.push(("nan", nan));
    let mut last = vec![f32::NEG_INFINITY; 1001];
    last[1000] = -1e30;
    last[3] = f32::NAN;
    cases.push(("last of 1001, rest -inf", last));
    cases.push(("one", vec![-2.5]));
    let mut inf = base.clone();
    inf[17] = f32::INFINITY;
    inf[18] = f32::NEG_INFINITY;
    inf[19] = f32::NAN;
    cases.push(("+inf wins, 3 non-finite", inf));
    cases.push(("all NaN", vec![f32::NAN; 3000]));
    // One scratch for every dispatch below: each must leave its ticket word zero.
    let max_groups = 7;
    let scratch = u32_buffer(
        &d,
        "argmax.scratch",
        &vec![0u32; argmax_scratch_words(argmax_groups(n as u32).max(max_groups)) as usize],
        ResourceClass::TokenScratch,
    );
    // Each case with the default group count and with 1, 2 and 7 workgroups, each kernel.
    let runs: Vec<(usize, &str, Vec<f32>, u32, usize)> = cases
        .into_iter()
        .enumerate()
        .flat_map(|(i, (name, logits))| {
            let default = argmax_groups(logits.len() as u32);
            [default, 1, 2, max_groups].into_iter().flat_map(move |g| {
                let logits = logits.clone();
                (0..2).map(move |kernel| (i, name, logits.clone(), g, kernel))
            })
        })
        .collect();
    for (i, name, logits, groups, kernel) in runs {
        let name = format!("{name}, {groups} groups, {}", kernels[kernel].desc().name);
        let lb = f32_buffer(&d, "logits", &logits, ResourceClass::TokenScratch);
        // Every other case binds the older 8-byte result: (index, value) only.
        let words = if i % 2 == 0 { 4 } else { 2 };
        // The sticky word starts cleared, as the host leaves it with new params.
        let init: Vec<u32> = (0..words)
            .map(|w| if w == 3 { 0 } else { u32::MAX })
            .collect();
        let result = u32_buffer(&d, "result", &init, ResourceClass::PersistentOutput);
        let params = u32_buffer(&d, "params", &[u32::MAX, 7, 8, 0], ResourceClass::Generic);
        // The token ring of argmax_advance: position 7 + 3 inside it, or past its end
        // (every other case: nothing written, the position still advances).
        let ring = if i % 2 == 0 { 16 } else { 10 };
        let tokens = u32_buffer(&d, "tokens", &vec![u32::MAX; ring], ResourceClass::Generic);
        let n = logits.len() as u32;
        let mut enc = d.encoder().unwrap();
        let mut bindings = vec![
            lb.slice(..),
            result.slice(..),
            params.slice(..),
            scratch.slice(..),
        ];
        if kernel == 0 {
            enc.dispatch(&kernels[0], [groups, 1, 1], &bindings, &ArgmaxPush { n })
                .unwrap();
        } else {
            bindings.push(tokens.slice(..));
            let push = ArgmaxAdvancePush { n, steps: 3 };
            enc.dispatch(&kernels[1], [groups, 1, 1], &bindings, &push)
                .unwrap();
        }
        enc.submit().unwrap().wait().unwrap();
        assert_eq!(
            scratch.read::<u32>(0, 1).unwrap(),
            vec![0],
            "{name}: ticket"
        );
        let r: Vec<u32> = result.read(0, words).unwrap();
        let (want_i, want_v) = argmax_cpu(&logits);
        if words == 4 {
            let got = TokenResult::from_words([r[0], r[1], r[2], r[3]]);
            assert_eq!(got.nonfinite, nonfinite_cpu(&logits), "{name}: nonfinite");
            let first_bad = if got.nonfinite > 0 { 7 + 1 } else { 0 };
            assert_eq!(got.first_bad, first_bad, "{name}: sticky position + 1");
            assert_eq!(got.index, want_i, "{name}");
            assert!(
                got.value == want_v || (got.value.is_nan() && want_v.is_nan()),
                "{name}: value {} vs {want_v}",
                got.value
            );
        } else {
            // An 8-byte result (older layout) gets (index, value) and nothing past it.
            assert_eq!(r[0], want_i, "{name}");
            let v = f32::from_bits(r[1]);
            assert!(v == want_v || (v.is_nan() && want_v.is_nan()), "{name}");
        }
        // argmax writes the token; argmax_advance also moves to position 7 + 3 and
        // records the token there when the ring holds it.
        let advanced = 3 * kernel as u32;
        assert_eq!(
            params.read::<u32>(0, 4).unwrap(),
            vec![want_i, 7 + advanced, 8 + advanced, 0],
            "{name}: params"
        );
        let mut ring_want = vec![u32::MAX; ring];
        if kernel == 1 && ring > 10 {
            ring_want[10] = want_i;
        }
        assert_eq!(
            tokens.read::<u32>(0, ring).unwrap(),
            ring_want,
            "{name}: ring"
        );
    }
}

/// The LM head with the greedy pick folded in (`matvec_norm_head_pick`): the logits as
/// `matvec_norm_head` writes them, bit for bit, and the pick, params, ring and ticket as
/// `argmax_advance` leaves them (against the CPU argmax of those logits), on 1 to 7
/// workgroups each taking every n-th block of rows, with ties across workgroups, NaN, ±inf
/// and all-NaN rows.
#[test]
fn head_with_the_pick_matches_head_then_argmax() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(21);
    let (rows, cols, eps) = (203, 40, 1e-6);
    // x > 0, so a row of +inf (-inf) weights gives +inf (-inf), one of NaN weights NaN.
    let x: Vec<f32> = rng.vec(cols, 1.0).iter().map(|v| v.abs() + 0.1).collect();
    let nw = vec![1.0; cols];
    let base = rng.vec(rows * cols, 0.3);
    let set_row = |w: &mut Vec<f32>, r: usize, v: f32| w[r * cols..(r + 1) * cols].fill(v);
    let mut cases: Vec<(&str, Vec<f32>)> = vec![("random", base.clone())];
    let mut tie = base.clone();
    for r in [150, 9, 90] {
        set_row(&mut tie, r, 2.0); // equal rows, equal logits: the lowest index wins
    }
    cases.push(("tie across workgroups", tie));
    let mut nan = base.clone();
    set_row(&mut nan, 0, f32::NAN);
    set_row(&mut nan, 202, f32::NAN);
    set_row(&mut nan, 33, 1.5);
    cases.push(("NaN rows", nan));
    let mut inf = base.clone();
    set_row(&mut inf, 70, f32::INFINITY);
    set_row(&mut inf, 71, f32::NEG_INFINITY);
    cases.push(("+inf wins", inf));
    let mut neg = vec![f32::NEG_INFINITY; rows * cols];
    set_row(&mut neg, 0, f32::NAN); // the pick: row 1, the first -inf
    cases.push(("every logit -inf or NaN", neg));
    cases.push(("all NaN", vec![f32::NAN; rows * cols]));
    let xb = f32_buffer(&d, "x", &padded(&x), ResourceClass::TokenScratch);
    let nb = f32_buffer(&d, "norm", &padded(&nw), ResourceClass::ReadOnlyWeight);
    let head_tpr = MATVEC_HEAD_FLOAT_THREADS_PER_ROW.max(d.info().subgroup_size);
    for dtype in DTYPES {
        let head = d
            .pipeline(matvec_kernel("matvec_norm_head", dtype, false).unwrap())
            .unwrap();
        let pick = d
            .pipeline(matvec_kernel("matvec_norm_head_pick", dtype, false).unwrap())
            .unwrap();
        for (name, w) in &cases {
            let wb = weight_buffer(&d, dtype, rows, cols, w);
            for (groups, tpr, steps) in [(1, 0, 1), (2, head_tpr, 3), (7, 0, 12), (3, 64, 9)] {
                let what = format!("{dtype:?} {name}, {groups} workgroups, tpr {tpr}");
                let push = MatvecPush {
                    threads_per_row: tpr,
                    pick_steps: steps,
                    ..mv_push(rows, cols, false, eps)
                };
                let want = f32_buffer(&d, "y", &vec![0.5; rows], ResourceClass::TokenScratch);
                let got = f32_buffer(&d, "y", &vec![0.5; rows], ResourceClass::TokenScratch);
                let p = PickBuffers::new(&d, groups);
                let io = [wb.slice(..), xb.slice(..), nb.slice(..)];
                let mut enc = d.encoder().unwrap();
                let plain: Vec<_> = io.iter().cloned().chain([want.slice(..)]).collect();
                enc.dispatch(&head, [groups, 1, 1], &plain, &push).unwrap();
                let with: Vec<_> = io
                    .into_iter()
                    .chain([got.slice(..)])
                    .chain(p.slices())
                    .collect();
                enc.dispatch(&pick, [groups, 1, 1], &with, &push).unwrap();
                enc.submit().unwrap().wait().unwrap();
                let logits: Vec<f32> = got.read(0, rows).unwrap();
                assert_eq!(
                    common::bits(&logits),
                    common::bits(&want.read::<f32>(0, rows).unwrap()),
                    "{what}: logits"
                );
                p.check(&what, &logits, steps);
            }
        }
    }
}

/// The first step with non-finite logits stays marked while later healthy steps run
/// (replayed steps queue without the host looking in between).
#[test]
fn nonfinite_marker_is_sticky_across_steps() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let k = d.pipeline(&ARGMAX).unwrap();
    let result = u32_buffer(&d, "result", &[0; 4], ResourceClass::PersistentOutput);
    let scratch = u32_buffer(
        &d,
        "argmax.scratch",
        &[0; argmax_scratch_words(2) as usize],
        ResourceClass::TokenScratch,
    );
    for (pos, bad) in [(3u32, false), (4, true), (5, false)] {
        let mut logits = vec![0.5f32; 100];
        if bad {
            logits[17] = f32::NAN;
        }
        let lb = f32_buffer(&d, "logits", &logits, ResourceClass::TokenScratch);
        let params = u32_buffer(&d, "params", &[0, pos, pos + 1, 0], ResourceClass::Generic);
        let mut enc = d.encoder().unwrap();
        enc.dispatch(
            &k,
            [2, 1, 1],
            &[
                lb.slice(..),
                result.slice(..),
                params.slice(..),
                scratch.slice(..),
            ],
            &ArgmaxPush { n: 100 },
        )
        .unwrap();
        enc.submit().unwrap().wait().unwrap();
        let r: Vec<u32> = result.read(0, 4).unwrap();
        let got = TokenResult::from_words([r[0], r[1], r[2], r[3]]);
        assert_eq!(got.nonfinite, bad as u32, "step at {pos}");
        assert_eq!(got.first_bad, if pos < 4 { 0 } else { 5 }, "step at {pos}");
    }
}

#[test]
fn silu_mul_and_add_match_reference() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let silu_mul = d.pipeline(&SILU_MUL).unwrap();
    let add = d.pipeline(&ADD).unwrap();
    let mut rng = Rng::new(9);
    let n = 3073usize;
    let (g, u, a, y0) = (
        rng.vec(n, 8.0),
        rng.vec(n, 1.0),
        rng.vec(n, 1.0),
        rng.vec(n, 1.0),
    );
    let gb = f32_buffer(&d, "g", &g, ResourceClass::TokenScratch);
    let ub = f32_buffer(&d, "u", &u, ResourceClass::TokenScratch);
    let ab = f32_buffer(&d, "a", &a, ResourceClass::TokenScratch);
    let hb = f32_buffer(&d, "h", &vec![f32::NAN; n], ResourceClass::TokenScratch);
    let yb = f32_buffer(&d, "y", &y0, ResourceClass::TokenScratch);
    let push = CountPush { n: n as u32 };
    let mut enc = d.encoder().unwrap();
    enc.dispatch(
        &silu_mul,
        [groups_for(n as u32, 256), 1, 1],
        &[gb.slice(..), ub.slice(..), hb.slice(..)],
        &push,
    )
    .unwrap();
    enc.dispatch(
        &add,
        [groups_for(n as u32, 256), 1, 1],
        &[ab.slice(..), yb.slice(..)],
        &push,
    )
    .unwrap();
    enc.submit().unwrap().wait().unwrap();
    assert_close(
        "silu_mul",
        &hb.read::<f32>(0, n).unwrap(),
        &silu_mul_cpu(&g, &u),
    );
    assert_eq!(
        yb.read::<f32>(0, n).unwrap(),
        add_cpu(&a, &y0),
        "add is exact"
    );
}

#[test]
fn matvec_threads_per_row_override_matches_reference() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(21);
    let (rows, cols) = (13usize, 4100usize);
    let w = rng.vec(rows * cols, 1.0);
    let x = rng.vec(cols, 1.0);
    let dtype = WeightDtype::F16;
    let want = matvec_cpu(&rounded(dtype, &w), rows, cols, &x, None);
    let k = d.pipeline(matvec(dtype)).unwrap();
    let wb = weight_buffer(&d, dtype, rows, cols, &w);
    let xb = f32_buffer(&d, "x", &padded(&x), ResourceClass::TokenScratch);
    for tpr in [32u32, 128, 256] {
        let yb = f32_buffer(&d, "y", &vec![f32::NAN; rows], ResourceClass::TokenScratch);
        let push = MatvecPush {
            threads_per_row: tpr,
            ..mv_push(rows, cols, false, 0.0)
        };
        let mut enc = d.encoder().unwrap();
        enc.dispatch(
            &k,
            matvec_groups_for(rows as u32, tpr),
            &[wb.slice(..), xb.slice(..), yb.slice(..)],
            &push,
        )
        .unwrap();
        enc.submit().unwrap().wait().unwrap();
        assert_close(
            &format!("matvec tpr {tpr}"),
            &yb.read::<f32>(0, rows).unwrap(),
            &want,
        );
    }
}

/// Runs the sampling kernel over `logits` at position `pos`; returns the chosen index.
fn run_sample(d: &Device, logits: &Buffer, p: &SamplePush, pos: u32) -> u32 {
    run_sample_result(d, logits, p, pos).index
}

/// Runs the sampling kernel; returns the whole 16-byte result.
fn run_sample_result(d: &Device, logits: &Buffer, p: &SamplePush, pos: u32) -> TokenResult {
    let k = d.pipeline(&SAMPLE).unwrap();
    let result = d
        .create_buffer(
            "result",
            TOKEN_RESULT_BYTES,
            ResourceClass::PersistentOutput,
        )
        .unwrap();
    let params = d
        .create_buffer("params", 16, ResourceClass::Generic)
        .unwrap();
    params.write(0, &[0u32, pos, pos + 1, 0]).unwrap();
    result.write(0, &[0u32; 4]).unwrap();
    let mut enc = d.encoder().unwrap();
    enc.dispatch(
        &k,
        [1, 1, 1],
        &[logits.slice(..), result.slice(..), params.slice(..)],
        p,
    )
    .unwrap();
    enc.submit().unwrap().wait().unwrap();
    let w = result.read::<u32>(0, 4).unwrap();
    let r = TokenResult::from_words([w[0], w[1], w[2], w[3]]);
    let first_bad = if r.nonfinite > 0 { pos + 1 } else { 0 };
    assert_eq!(w[3], first_bad, "sticky non-finite position + 1");
    assert_eq!(
        params.read::<u32>(0, 1).unwrap()[0],
        r.index,
        "params.token must carry the sample"
    );
    r
}

#[test]
fn sampling_kernel_counts_nonfinite_and_tiny_temperature_is_greedy() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(37);
    let n = 2003usize;
    let mut logits = rng.vec(n, 4.0);
    logits[1500] = 9.0;
    logits[1700] = 9.0; // a tie: greedy takes the lower index
    logits[3] = f32::NAN;
    logits[4] = f32::INFINITY;
    logits[5] = f32::NEG_INFINITY;
    let lb = f32_buffer(&d, "logits", &logits, ResourceClass::TokenScratch);
    for temperature in [1e-40f32, 1e-30, 1e-7, 0.0] {
        let p = SamplePush {
            n: n as u32,
            top_k: 0,
            temperature,
            top_p: 1.0,
            seed_lo: 5,
            seed_hi: 9,
            _pad: [0; 2],
        };
        let r = run_sample_result(&d, &lb, &p, 4);
        assert_eq!(r.index, 1500, "temperature {temperature}: greedy");
        assert_eq!(
            sample_cpu(&logits, &p, 4),
            1500,
            "CPU, temperature {temperature}"
        );
        assert_eq!(r.value, 9.0);
        assert_eq!(r.nonfinite, 3, "NaN, +inf, -inf counted");
        assert_eq!(nonfinite_cpu(&logits), 3);
    }
    // All NaN (NaN weights): flagged with the full count.
    let nan = f32_buffer(&d, "nan", &vec![f32::NAN; 777], ResourceClass::TokenScratch);
    let p = SamplePush {
        n: 777,
        top_k: 40,
        temperature: 0.8,
        top_p: 0.9,
        seed_lo: 1,
        seed_hi: 0,
        _pad: [0; 2],
    };
    assert_eq!(run_sample_result(&d, &nan, &p, 0).nonfinite, 777);
}

#[test]
fn sampling_kernel_follows_the_distribution_and_the_cpu_reference() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(31);
    let n = 3001usize;
    // Three clear leaders with probabilities ~0.5, 0.3, 0.2 at temperature 1; the rest far below.
    let mut logits: Vec<f32> = rng.vec(n, 1.0).iter().map(|v| v - 30.0).collect();
    let lead = [(1200usize, 0.5f32), (7, 0.3), (2999, 0.2)];
    for (i, p) in lead {
        logits[i] = p.ln();
    }
    logits[5] = f32::NAN; // never a candidate
    let lb = f32_buffer(&d, "logits", &logits, ResourceClass::TokenScratch);
    let base = SamplePush {
        n: n as u32,
        top_k: 3,
        temperature: 1.0,
        top_p: 1.0,
        seed_lo: 0,
        seed_hi: 0,
        _pad: [0; 2],
    };
    // Greedy limits.
    assert_eq!(
        run_sample(&d, &lb, &SamplePush { top_k: 1, ..base }, 3),
        1200
    );
    assert_eq!(
        run_sample(
            &d,
            &lb,
            &SamplePush {
                top_k: 0,
                top_p: 1e-6,
                ..base
            },
            3
        ),
        1200
    );
    // Frequencies over seeds, and agreement with the CPU reference.
    let mut counts = [0usize; 3];
    let mut agree = 0;
    let draws = 300;
    for seed in 0..draws {
        let p = SamplePush {
            seed_lo: seed as u32,
            seed_hi: 7,
            ..base
        };
        let got = run_sample(&d, &lb, &p, 11);
        let slot = lead
            .iter()
            .position(|(i, _)| *i == got as usize)
            .expect("sampled outside the top 3");
        counts[slot] += 1;
        agree += (got == sample_cpu(&logits, &p, 11)) as usize;
        assert_eq!(
            got,
            run_sample(&d, &lb, &p, 11),
            "same seed and position, same token"
        );
    }
    for (slot, (_, p)) in lead.iter().enumerate() {
        let f = counts[slot] as f32 / draws as f32;
        assert!(
            (f - p).abs() < 0.08,
            "token {slot}: frequency {f} vs probability {p}"
        );
    }
    assert!(
        agree >= draws - 3,
        "GPU and CPU sampling agreed on {agree}/{draws} draws"
    );
    // Nucleus 0.7 keeps the two leaders only (0.5 + 0.3 >= 0.7).
    for seed in 0..60u32 {
        let p = SamplePush {
            top_k: 0,
            top_p: 0.7,
            seed_lo: seed,
            ..base
        };
        let got = run_sample(&d, &lb, &p, 2) as usize;
        assert!(got == 1200 || got == 7, "top-p 0.7 sampled {got}");
    }
}

/// The prefetch kernel reads every sector it is given (its xor reaches the sink exactly
/// when it equals `magic`) and writes nothing otherwise.
#[test]
fn prefetch_touches_every_sector_and_writes_only_on_magic() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let pf = d.pipeline(&PREFETCH).unwrap();
    let mut rng = Rng::new(21);
    let words: Vec<u32> = (0..8 * 1000).map(|_| rng.next_u32()).collect();
    let w = u32_buffer(&d, "w", &words, ResourceClass::ReadOnlyWeight);
    let anchor = u32_buffer(&d, "anchor", &[0x55u32], ResourceClass::TokenScratch);
    let threads = 256u32;
    // Thread t xors the first word of sectors t, t + 256, ...
    let acc: Vec<u32> = (0..threads as usize)
        .map(|t| {
            (t..1000)
                .step_by(threads as usize)
                .fold(0x55, |a, s| a ^ words[8 * s])
        })
        .collect();
    let unused = (0u32..)
        .find(|m| !acc.contains(m))
        .expect("a word no thread ends with");
    for (magic, want) in [(acc[5], Some(5usize)), (unused, None)] {
        let sink = u32_buffer(&d, "sink", &[0u32; 64], ResourceClass::TokenScratch);
        let push = PrefetchPush {
            sectors: 1000,
            threads,
            magic,
        };
        let mut enc = d.encoder().unwrap();
        let s = [w.slice(..), anchor.slice(..), sink.slice(..)];
        enc.dispatch(&pf, [threads / 256, 1, 1], &s, &push).unwrap();
        enc.submit().unwrap().wait().unwrap();
        let got: Vec<u32> = sink.read(0, 64).unwrap();
        let expect: Vec<u32> = (0..64)
            .map(|slot| {
                let hit = acc
                    .iter()
                    .enumerate()
                    .any(|(t, &a)| t % 64 == slot && a == magic);
                if hit {
                    magic
                } else {
                    0
                }
            })
            .collect();
        assert_eq!(got, expect, "magic {magic:#x}");
        if let Some(t) = want {
            assert_eq!(got[t], magic);
        } else {
            assert!(got.iter().all(|&v| v == 0));
        }
    }
}

/// A kernel whose workgroup memory or invocation count is over the device's limits is
/// refused when its pipeline is made, with the numbers, and never dispatched (a driver may
/// accept such a pipeline and never finish the dispatch). The crate's own kernels fit.
#[test]
fn kernels_over_the_device_workgroup_limits_are_refused() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let info = d.info().clone();
    let shared = sluice::KernelDesc {
        name: "too_much_shared",
        workgroup_memory_bytes: info.max_workgroup_memory_bytes + 16,
        ..ADD
    };
    let err = d.pipeline(&shared).expect_err("refused").to_string();
    let want = format!(
        "{} bytes of workgroup memory; the device allows {}",
        info.max_workgroup_memory_bytes + 16,
        info.max_workgroup_memory_bytes
    );
    assert!(
        err.contains("too_much_shared") && err.contains(&want),
        "{err}"
    );
    let wide = sluice::KernelDesc {
        name: "too_wide",
        workgroup_size: [info.max_workgroup_invocations + 1, 1, 1],
        ..ADD
    };
    let err = d.pipeline(&wide).expect_err("refused").to_string();
    assert!(
        err.contains("too_wide") && err.contains("invocations"),
        "{err}"
    );
    // The same kernel within the limits is made.
    d.pipeline(&ADD).unwrap();
}

/// The features a kernel needs are read from its SPIR-V, and a kernel needing one the
/// device did not enable is refused when its pipeline is made (named, with the feature),
/// never handed to the driver. Kernel statistics need `Options::kernel_statistics`.
#[test]
fn kernels_needing_features_the_device_lacks_are_refused() {
    use sluice::KernelFeature;
    assert_eq!(ADD.features().unwrap(), Vec::<KernelFeature>::new());
    let cm = MATVEC_BATCH_CM.features().unwrap();
    assert!(cm.contains(&KernelFeature::CooperativeMatrix), "{cm:?}");
    assert!(cm.contains(&KernelFeature::Float16), "{cm:?}");
    let dp = MATVEC_Q4_K_DP.features().unwrap();
    assert_eq!(dp, vec![KernelFeature::IntegerDotProduct]);

    // Validated where the device lacks matrix units (lavapipe: the refusal path); where it
    // has them, without the layer (it predates VK_KHR_cooperative_matrix).
    let d = sluice::testing::coopmat_or_test_device();
    let _guard = ValidationGuard::new(&d);
    let info = d.info().clone();
    let made = d.pipeline(&MATVEC_BATCH_CM);
    if info.coopmat_f16_16x16 {
        made.unwrap();
    } else {
        let err = made.expect_err("refused").to_string();
        assert!(
            err.contains("\"matvec_batch_cm\"") && err.contains("cooperative matrices"),
            "{err}"
        );
    }
    assert_eq!(d.pipeline(&MATVEC_Q4_K_DP).is_ok(), info.int_dot);
    assert!(!info.kernel_statistics);
    let err = d
        .kernel_statistics(&ADD)
        .expect_err("not asked for")
        .to_string();
    assert!(err.contains("Options::kernel_statistics"), "{err}");
}
