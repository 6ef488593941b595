//! The batched-decode kernels over a paged KV cache against CPU references: per-row
//! q/k norm + RoPE + paged append, causal attention through a block table (GQA, odd head
//! sizes, scattered blocks, rows of several sequences), the per-row argmax; and batch
//! invariance: a row's output is bit-identical alone and among other rows.
//! Bound: NMSE <= 1e-6 against the f64 reference (caches are f16 on both sides).

use sluice::testing::{test_device, ValidationGuard};
use sluice::{Buffer, Device, ResourceClass};
use sluice_kernels::*;

mod common;
use common::*;

const NMSE_MAX: f64 = 1e-6;

/// Whether two results are equal bit for bit (batch invariance).
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Words read back as the f32 values whose bits they are.
fn floats(words: Vec<u32>) -> Vec<f32> {
    words.into_iter().map(f32::from_bits).collect()
}

/// A gated kernel's y words as values: two f16 halves each (`pairs`, Y_F16_PAIRS), else
/// f32 bits.
fn y_values(words: Vec<u32>, pairs: bool) -> Vec<f32> {
    if pairs {
        unpack_f16_pairs(&words)
    } else {
        floats(words)
    }
}

/// A pool of `blocks` blocks handed out in a scrambled order to `seqs` slots.
fn scattered_table(seqs: u32, max_blocks: u32, blocks: u32) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..blocks).collect();
    let mut rng = Rng::new(7);
    for i in (1..ids.len()).rev() {
        ids.swap(i, rng.next_u32() as usize % (i + 1));
    }
    (0..seqs * max_blocks)
        .map(|i| ids[i as usize % ids.len()])
        .collect()
}

fn rows_buffer(d: &Device, rows: &[(u32, u32)]) -> Buffer {
    let words: Vec<u32> = rows.iter().flat_map(|&(p, s)| [p, s]).collect();
    u32_buffer(d, "rows", &words, ResourceClass::Generic)
}

/// Runs batched attention kernel `kernel` (the plain one or a grouped-query one) over
/// `rows`: `n_out` output words (f32 bits, or f16 pairs with `out_f16`), all bits set where
/// not written.
#[allow(clippy::too_many_arguments)]
fn run_attention(
    d: &Device,
    kernel: &sluice::KernelDesc,
    p: &BatchAttnPush,
    rows: &[(u32, u32)],
    table: &Buffer,
    q: &[f32],
    kc: &Buffer,
    vc: &Buffer,
    n_out: usize,
) -> Vec<u32> {
    let none = u32_buffer(d, "unused", &[0; 4], ResourceClass::TokenScratch);
    run_attention_into(
        d,
        kernel,
        p,
        rows,
        (table, q),
        (kc, vc),
        n_out,
        (&none, &none),
    )
}

/// [`run_attention`] with bindings 8 and 9 (the int8 output with `p.q8`).
#[allow(clippy::too_many_arguments)]
fn run_attention_into(
    d: &Device,
    kernel: &sluice::KernelDesc,
    p: &BatchAttnPush,
    rows: &[(u32, u32)],
    (table, q): (&Buffer, &[f32]),
    (kc, vc): (&Buffer, &Buffer),
    n_out: usize,
    (oq, od): (&Buffer, &Buffer),
) -> Vec<u32> {
    let gqa = kernel.name != BATCH_ATTENTION.name;
    let groups = if gqa {
        let quads = (p.heads / p.kv_heads).div_ceil(BATCH_ATTENTION_GQA_HEADS);
        p.kv_heads * quads
    } else {
        p.heads
    };
    let k = d.pipeline(kernel).unwrap();
    let rb = rows_buffer(d, rows);
    let qb = f32_buffer(d, "q", q, ResourceClass::TokenScratch);
    let ob = u32_buffer(d, "out", &vec![!0; n_out], ResourceClass::TokenScratch);
    // Split contexts: the partials (NaN before: every one read is written first; a vec4
    // per value for the grouped kernel) and the tickets (zero before, checked zero after).
    let lanes = if gqa { BATCH_ATTENTION_GQA_HEADS } else { 1 };
    let (floats, tickets) =
        batch_attention_scratch(rows.len() as u32, groups, p.splits, p.head_dim, lanes);
    let part = u32_buffer(
        d,
        "part",
        &vec![0x7fc0_0000; floats as usize],
        ResourceClass::TokenScratch,
    );
    let tick = u32_buffer(
        d,
        "tick",
        &vec![0; tickets as usize],
        ResourceClass::Generic,
    );
    let longest = rows.iter().map(|r| r.0 + 1).max().unwrap_or(1);
    let z = batch_attention_z(longest, p.chunk, p.splits);
    let mut enc = d.encoder().unwrap();
    enc.dispatch(
        &k,
        [groups, rows.len() as u32, z],
        &[
            rb.slice(..),
            table.slice(..),
            qb.slice(..),
            kc.slice(..),
            vc.slice(..),
            ob.slice(..),
            kc.slice(..),
            vc.slice(..),
            oq.slice(..),
            od.slice(..),
            part.slice(..),
            tick.slice(..),
        ],
        p,
    )
    .unwrap();
    enc.submit().unwrap().wait().unwrap();
    let left: Vec<u32> = tick.read(0, tickets as usize).unwrap();
    assert!(left.iter().all(|&t| t == 0), "tickets left non-zero");
    ob.read(0, n_out).unwrap()
}

/// [`ACT_F16`] over `groups` rows (tokens past `p.tokens`: zeros), norm weights `nw` when
/// `p.norm` is 1: `groups * p.h_words` words, all bits set where not written.
fn run_act_f16(d: &Device, x: &[f32], nw: &[f32], p: ActF16Push, groups: u32) -> Vec<u32> {
    let k = d.pipeline(&ACT_F16).unwrap();
    let xbuf = f32_buffer(d, "x", x, ResourceClass::TokenScratch);
    let nbuf = f32_buffer(d, "norm_w", nw, ResourceClass::ReadOnlyWeight);
    let words = (groups * p.h_words) as usize;
    let out = u32_buffer(d, "xh", &vec![!0; words], ResourceClass::TokenScratch);
    let mut enc = d.encoder().unwrap();
    let bindings = [xbuf.slice(..), nbuf.slice(..), out.slice(..)];
    enc.dispatch(&k, [groups, 1, 1], &bindings, &p).unwrap();
    enc.submit().unwrap().wait().unwrap();
    out.read(0, words).unwrap()
}

/// [`ACT_F16`] without a norm over `tokens` rows of `cols` floats `x_stride` apart:
/// `h_words` words per row (what the matrix-unit matvecs read).
fn act_f16_words(
    d: &Device,
    x: &[f32],
    cols: u32,
    tokens: u32,
    x_stride: u32,
    h_words: u32,
) -> Vec<u32> {
    let p = ActF16Push {
        cols,
        tokens,
        x_stride,
        h_words,
        norm: 0,
        eps: 0.0,
    };
    run_act_f16(d, x, &[0.0], p, tokens)
}

#[test]
fn batch_attention_matches_paged_reference_and_is_batch_invariant() {
    // The engine's pick: grouped-query from 4 query heads per key/value head, the
    // head_dim-128 form where it fits.
    let pick = |h, kv, hd| {
        let (k, groups) = batch_attention_kernel(h, kv, hd);
        (k.name, groups)
    };
    assert_eq!(pick(16, 8, 128), ("batch_attention", 16));
    assert_eq!(pick(32, 8, 128), ("batch_attention_gqa_hd128", 8));
    assert_eq!(pick(32, 8, 64), ("batch_attention_gqa", 8));
    assert_eq!(pick(40, 8, 128), ("batch_attention_gqa_hd128", 16));
    // The split partials hold a vec4 per value for the grouped kernel.
    assert_eq!(batch_attention_lanes(16, 8), 1);
    assert_eq!(batch_attention_lanes(32, 8), BATCH_ATTENTION_GQA_HEADS);
    assert_eq!(batch_attention_lanes(40, 8), BATCH_ATTENTION_GQA_HEADS);
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(31);
    // (heads, kv_heads, head_dim, block, context): GQA and MHA, head_dim 256 (two dims
    // per invocation) and an odd-sized one, blocks of 16 and 5; 1 to 8 query heads per
    // key/value head (up to 4 per workgroup: 5 and 8 take two workgroups per kv head);
    // head_dim 128 (the hd128 kernel too) with contexts past its 256-key tile.
    for (heads, kv_heads, hd, block, ctx) in [
        (4u32, 2u32, 64u32, 16u32, 40u32),
        (6, 2, 128, 16, 300),
        (3, 3, 256, 5, 40),
        (4, 1, 22, 7, 40),
        (10, 2, 32, 16, 40),
        (16, 2, 64, 8, 40),
        (8, 2, 128, 16, 300),
        (20, 4, 128, 7, 40),
    ] {
        let (seqs, max_blocks) = (3u32, ctx.div_ceil(block) + 1);
        let blocks = seqs * max_blocks;
        let capacity = blocks * block;
        let table_words = scattered_table(seqs, max_blocks, blocks);
        let table = u32_buffer(&d, "table", &table_words, ResourceClass::Generic);
        let cache_len = (kv_heads * capacity * hd) as usize;
        let (kc, vc, kc_f, vc_f) = random_kv_caches(&d, &mut rng, cache_len);
        // Rows of three sequences, positions 0, mid-block, block edges, > 128 keys (two
        // tiles of the 128-key kernels), > 256 where the context allows (two of hd128's).
        let last = max_blocks * block - 1;
        let rows = [
            (0u32, 1u32),
            (37, 0),
            (block - 1, 2),
            (block, 1),
            (129.min(last), 2),
            (290.min(last), 0),
        ];
        let q = rng.vec(rows.len() * (heads * hd + 3) as usize, 3.0);
        // One split per row, then splits of at least 16 positions (1 to 4 per row here)
        // and of at least 5 (up to 8, of equal length).
        for chunk in [0u32, 16, 5] {
            let p = BatchAttnPush {
                heads,
                kv_heads,
                head_dim: hd,
                capacity,
                q_stride: heads * hd + 3,
                o_stride: heads * hd + 1,
                scale: 1.0 / (hd as f32).sqrt(),
                block,
                max_blocks,
                out_f16: 0,
                q8: 0,
                q8_words: 0,
                q8_blocks: 0,
                chunk,
                splits: if chunk == 0 {
                    0
                } else {
                    BATCH_ATTENTION_MAX_SPLITS
                },
                ..Default::default()
            };
            let want = batch_attention_cpu(&p, &rows, &table_words, &q, &kc_f, &vc_f);
            let kernels = [
                &BATCH_ATTENTION,
                &BATCH_ATTENTION_GQA,
                &BATCH_ATTENTION_GQA_HD128,
            ];
            for kernel in kernels
                .into_iter()
                .filter(|k| hd == 128 || k.name != "batch_attention_gqa_hd128")
            {
                let n_out = rows.len() * p.o_stride as usize;
                let got = floats(run_attention(
                    &d, kernel, &p, &rows, &table, &q, &kc, &vc, n_out,
                ));
                let n = (heads * hd) as usize;
                let (mut g, mut w) = (Vec::new(), Vec::new());
                for r in 0..rows.len() {
                    let at = r * p.o_stride as usize;
                    g.extend_from_slice(&got[at..at + n]);
                    w.extend_from_slice(&want[at..at + n]);
                    assert!(got[at + n].is_nan(), "gap after row {r} written");
                }
                let what = format!(
                    "{} {heads}/{kv_heads} hd {hd} block {block} splits {}",
                    kernel.name, p.splits
                );
                assert_nmse(&what, &g, &w, NMSE_MAX);
                // Each row alone: bit-identical to its result in the batch.
                for (r, &row) in rows.iter().enumerate() {
                    let qr = &q[r * p.q_stride as usize..(r + 1) * p.q_stride as usize];
                    let n_row = p.o_stride as usize;
                    let alone = floats(run_attention(
                        &d,
                        kernel,
                        &p,
                        &[row],
                        &table,
                        qr,
                        &kc,
                        &vc,
                        n_row,
                    ));
                    let at = r * p.o_stride as usize;
                    let same = same_bits(&alone[..n], &got[at..at + n]);
                    assert!(same, "{what}: row {r} differs alone vs batched");
                }
                // f16 output (the matrix-unit matvec's input): bit-identical to ACT_F16 of the
                // f32 output; the word after each row untouched.
                let h_stride = heads * hd + 2;
                let p16 = BatchAttnPush {
                    o_stride: h_stride,
                    out_f16: 1,
                    ..p
                };
                let words = rows.len() * h_stride as usize / 2;
                let got16 = run_attention(&d, kernel, &p16, &rows, &table, &q, &kc, &vc, words);
                let rows_n = rows.len() as u32;
                let want16 = act_f16_words(&d, &got, heads * hd, rows_n, p.o_stride, h_stride / 2);
                for r in 0..rows.len() {
                    let at = r * h_stride as usize / 2;
                    let row = at..at + n / 2;
                    assert_eq!(got16[row.clone()], want16[row], "{what}: f16 row {r}");
                    assert_eq!(
                        got16[at + n / 2],
                        !0,
                        "{what}: f16 gap after row {r} written"
                    );
                }
                // int8 output (the integer-dot matvec's input): bit-identical to ACT_Q8 of the
                // f32 output, rows one word / block entry apart; `out` untouched.
                if hd % 32 == 0 {
                    let (qs, ds) = act_q8_strides(heads * hd);
                    let pq = BatchAttnPush {
                        q8: 1,
                        q8_words: qs + 1,
                        q8_blocks: ds + 1,
                        ..p
                    };
                    let (nq, nd) = (
                        rows.len() * (qs + 1) as usize,
                        rows.len() * (ds + 1) as usize,
                    );
                    let oq = u32_buffer(&d, "oq", &vec![!0; nq], ResourceClass::TokenScratch);
                    let od = u32_buffer(&d, "od", &vec![!0; 4 * nd], ResourceClass::TokenScratch);
                    let out = run_attention_into(
                        &d,
                        kernel,
                        &pq,
                        &rows,
                        (&table, &q),
                        (&kc, &vc),
                        n_out,
                        (&oq, &od),
                    );
                    assert!(
                        out.iter().all(|&w| w == !0),
                        "{what}: q8 wrote the f32 output"
                    );
                    let packed: Vec<f32> = (0..rows.len())
                        .flat_map(|r| got[r * p.o_stride as usize..][..n].to_vec())
                        .collect();
                    let want = act_q8_rows(&d, &packed, heads * hd, rows.len() as u32);
                    let (gq, gd): (Vec<u32>, Vec<u32>) =
                        (oq.read(0, nq).unwrap(), od.read(0, 4 * nd).unwrap());
                    let want = (&want.0[..], &want.1[..]);
                    assert_q8_rows(&what, (&gq, &gd), want, heads * hd, rows.len());
                }
            }
        }
    }
}

#[test]
fn batch_rope_appends_to_paged_rows() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let k = d.pipeline(&BATCH_ROPE).unwrap();
    let mut rng = Rng::new(5);
    // side: 0 = q, k and v in one buffer; 1 = v, 2 = k and v in a second buffer of
    // another row stride (a batched step's qkv split by format).
    for (heads, kv_heads, hd, flags, side) in [
        (4u32, 2u32, 64u32, ROPE_NORM, 0u32),
        (2, 1, 24, 0, 1),
        (2, 2, 256, ROPE_NORM, 2),
        (4, 2, 64, ROPE_BIAS | ROPE_FREQ, 1),
        (2, 1, 32, ROPE_BIAS | ROPE_NORM, 2),
    ] {
        let (seqs, block, max_blocks) = (2u32, 4u32, 6u32);
        let capacity = seqs * max_blocks * block;
        let table_words = scattered_table(seqs, max_blocks, seqs * max_blocks);
        let table = u32_buffer(&d, "table", &table_words, ResourceClass::Generic);
        let rows = [(0u32, 0u32), (9, 1), (22, 0), (3, 1)];
        let stride = (heads + 2 * kv_heads) * hd + 2;
        let p = BatchRopePush {
            heads,
            kv_heads,
            head_dim: hd,
            capacity,
            flags,
            eps: 1e-6,
            theta: 10000.0,
            token_stride: stride,
            block,
            max_blocks,
            k_stride: stride,
            v_stride: stride,
        };
        let qkv = rng.vec(rows.len() * stride as usize, 2.0);
        // The second buffer: rows of side_stride floats holding each row's qkv from
        // element `from` (k or v) on, 6 floats of padding after them.
        let from = if side == 2 {
            heads * hd
        } else {
            (heads + kv_heads) * hd
        } as usize;
        let side_stride = stride as usize - from + 6;
        let mut side_rows = vec![0f32; rows.len() * side_stride];
        for r in 0..rows.len() {
            let src = &qkv[r * stride as usize + from..(r + 1) * stride as usize];
            side_rows[r * side_stride..][..src.len()].copy_from_slice(src);
        }
        let side_b = f32_buffer(&d, "side", &side_rows, ResourceClass::TokenScratch);
        // What moved to the second buffer is NaN in the first (a read there shows).
        let mut qkv_gpu = qkv.clone();
        if side > 0 {
            for r in 0..rows.len() {
                qkv_gpu[r * stride as usize + from..(r + 1) * stride as usize].fill(f32::NAN);
            }
        }
        let p = BatchRopePush {
            k_stride: if side == 2 {
                side_stride as u32
            } else {
                stride
            },
            v_stride: if side >= 1 {
                side_stride as u32
            } else {
                stride
            },
            ..p
        };
        let qn = rng.vec(hd as usize, 1.0);
        let kn = rng.vec(hd as usize, 1.0);
        let bias = rng.vec(((heads + 2 * kv_heads) * hd) as usize, 1.0);
        let freq: Vec<f32> = rng
            .vec(hd as usize / 2, 0.5)
            .iter()
            .map(|f| 0.75 + f)
            .collect();
        let bias_b = f32_buffer(&d, "bias", &bias, ResourceClass::ReadOnlyWeight);
        let freq_b = f32_buffer(&d, "freq", &freq, ResourceClass::ReadOnlyWeight);
        let qkv_b = f32_buffer(&d, "qkv", &qkv_gpu, ResourceClass::TokenScratch);
        let (qn_b, kn_b) = (
            f32_buffer(&d, "qn", &qn, ResourceClass::ReadOnlyWeight),
            f32_buffer(&d, "kn", &kn, ResourceClass::ReadOnlyWeight),
        );
        let cache_words = (kv_heads * capacity * hd / 2) as usize;
        let kc = u32_buffer(&d, "kc", &vec![0; cache_words], ResourceClass::AppendOnlyKv);
        let vc = u32_buffer(&d, "vc", &vec![0; cache_words], ResourceClass::AppendOnlyKv);
        let rb = rows_buffer(&d, &rows);
        let (ka, va) = (
            (heads * hd) as u64 * 4,
            ((heads + kv_heads) * hd) as u64 * 4,
        );
        let kv_bytes = (kv_heads * hd) as u64 * 4;
        let (kb, vb) = match side {
            0 => (qkv_b.slice(ka..), qkv_b.slice(va..)),
            1 => (qkv_b.slice(ka..), side_b.slice(..)),
            _ => (side_b.slice(..), side_b.slice(kv_bytes..)),
        };
        let mut enc = d.encoder().unwrap();
        enc.dispatch(
            &k,
            [heads + kv_heads, rows.len() as u32, 1],
            &[
                rb.slice(..),
                table.slice(..),
                qkv_b.slice(..),
                kb,
                vb,
                qn_b.slice(..),
                kn_b.slice(..),
                kc.slice(..),
                vc.slice(..),
                bias_b.slice(..),
                freq_b.slice(..),
            ],
            &p,
        )
        .unwrap();
        enc.submit().unwrap().wait().unwrap();
        let got_qkv: Vec<f32> = qkv_b.read(0, qkv.len()).unwrap();
        let kc_got = unpack_f16_pairs(&kc.read::<u32>(0, cache_words).unwrap());
        let vc_got = unpack_f16_pairs(&vc.read::<u32>(0, cache_words).unwrap());
        let rp = QkRopePush {
            heads,
            kv_heads,
            head_dim: hd,
            capacity,
            flags,
            eps: p.eps,
            theta: p.theta,
            token_stride: 0,
        };
        let hdu = hd as usize;
        for (r, &(pos, seq)) in rows.iter().enumerate() {
            let at = r * stride as usize;
            let mut q = qkv[at..at + (heads * hd) as usize].to_vec();
            let kat = at + (heads * hd) as usize;
            let mut kk = qkv[kat..kat + (kv_heads * hd) as usize].to_vec();
            let mut v = qkv[kat + (kv_heads * hd) as usize..][..(kv_heads * hd) as usize].to_vec();
            let extras = RopeExtras {
                bias: &bias,
                freq: &freq,
            };
            qk_norm_rope_cpu(&rp, pos, &mut q, &mut kk, &mut v, &qn, &kn, extras);
            let what = format!("batch_rope hd {hd} flags {flags} row {r}");
            assert_nmse(&what, &got_qkv[at..at + q.len()], &q, NMSE_MAX);
            let slot = paged_slot(&table_words, seq, pos, block, max_blocks, capacity).unwrap();
            for j in 0..kv_heads as usize {
                let row = (j * capacity as usize + slot as usize) * hdu;
                let kf: Vec<f32> = kk[j * hdu..(j + 1) * hdu]
                    .iter()
                    .map(|&x| half::f16::from_f32(x).to_f32())
                    .collect();
                let vf: Vec<f32> = v[j * hdu..(j + 1) * hdu]
                    .iter()
                    .map(|&x| half::f16::from_f32(x).to_f32())
                    .collect();
                assert_nmse(&format!("{what} k{j}"), &kc_got[row..row + hdu], &kf, 1e-6);
                assert_eq!(&vc_got[row..row + hdu], &vf[..], "{what} v{j}");
            }
        }
        // Exactly the rows' slots were written.
        let written = (0..capacity)
            .filter(|&s| kc_got[(s * hd) as usize..][..hdu].iter().any(|&x| x != 0.0))
            .count();
        assert_eq!(written, rows.len(), "hd {hd}: slots written");
    }
}

#[test]
fn argmax_rows_picks_per_row_with_ties_and_nonfinite() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let k = d.pipeline(&ARGMAX_ROWS).unwrap();
    let mut rng = Rng::new(9);
    // One workgroup per row (1000 logits), several (the default for 9000: 3), and more
    // than the logits need (5): every row's pick is the same.
    for (vocab, stride, groups) in [
        (1000u32, 1003u32, None),
        (9000, 9001, None),
        (9000, 9001, Some(5)),
    ] {
        let groups = groups.unwrap_or_else(|| argmax_groups(vocab));
        let mut logits = rng.vec(5 * stride as usize, 4.0);
        let at = |r: usize, i: usize| r * stride as usize + i;
        // Row 1: a tie between 700 and 3 (lowest index wins); row 2: NaN and inf around;
        // row 3: all NaN; row 4: the max in the last element.
        logits[at(1, 700)] = 9.0;
        logits[at(1, 3)] = 9.0;
        logits[at(2, 10)] = f32::NAN;
        logits[at(2, 11)] = f32::INFINITY;
        for i in 0..vocab as usize {
            logits[at(3, i)] = f32::NAN;
        }
        logits[at(4, vocab as usize - 1)] = 50.0;
        let lb = f32_buffer(&d, "logits", &logits, ResourceClass::TokenScratch);
        let rb = u32_buffer(&d, "result", &[7; 20], ResourceClass::PersistentOutput);
        let words = argmax_rows_scratch_words(5, groups) as usize;
        let sb = u32_buffer(&d, "scratch", &vec![0; words], ResourceClass::Generic);
        let mut enc = d.encoder().unwrap();
        // Twice (the encoder orders them): the second finds the tickets put back to zero.
        for _ in 0..2 {
            enc.dispatch(
                &k,
                [groups, 5, 1],
                &[lb.slice(..), rb.slice(..), sb.slice(..)],
                &ArgmaxRowsPush { vocab, stride },
            )
            .unwrap();
        }
        enc.submit().unwrap().wait().unwrap();
        let got: Vec<u32> = rb.read(0, 20).unwrap();
        for r in 0..5 {
            let row = &logits[at(r, 0)..at(r, vocab as usize)];
            let bad = row.iter().filter(|v| !v.is_finite()).count() as u32;
            let mut best = None::<(usize, f32)>;
            for (i, &v) in row.iter().enumerate() {
                if !v.is_nan() && best.is_none_or(|(_, b)| v > b) {
                    best = Some((i, v));
                }
            }
            let (i, v) = best.unwrap_or((0, row[0]));
            let w = &got[4 * r..4 * r + 4];
            let what = format!("vocab {vocab}, {groups} groups, row {r}");
            assert_eq!((w[0], w[2], w[3]), (i as u32, bad, 0), "{what}");
            assert_eq!(f32::from_bits(w[1]).to_bits(), v.to_bits(), "{what}: value");
        }
        let tickets: Vec<u32> = sb.read(0, words).unwrap();
        for r in 0..5 {
            assert_eq!(
                tickets[r * words / 5],
                0,
                "vocab {vocab}: row {r}'s ticket back at 0"
            );
        }
    }
}

/// One batched-matvec dispatch; returns y (tokens x y_stride).
#[allow(clippy::too_many_arguments)]
fn run_matvec_batch(
    d: &Device,
    dt: WeightDtype,
    variant: MatmulVariant,
    p: &MatvecBatchPush,
    w: &Buffer,
    wb: &Buffer,
    x: &[f32],
    nw: &Buffer,
    y0: &[f32],
) -> Vec<f32> {
    let desc = matvec_batch(dt, variant.has_norm(), variant.has_silu()).unwrap();
    let k = d.pipeline(desc).unwrap();
    let lay = matvec_batch_layout(p.rows, p.tokens);
    let groups = lay.groups;
    let p = MatvecBatchPush {
        tokens_per_wg: lay.tokens_per_wg,
        row_groups_y: lay.row_groups_y,
        ..*p
    };
    let xbuf = f32_buffer(d, "x", x, ResourceClass::TokenScratch);
    let ybuf = f32_buffer(d, "y", y0, ResourceClass::TokenScratch);
    let mut slices = vec![w.slice(..)];
    if variant.has_silu() {
        slices.push(wb.slice(..));
    }
    slices.push(xbuf.slice(..));
    if variant.has_norm() {
        slices.push(nw.slice(..));
    }
    slices.push(ybuf.slice(..));
    let mut enc = d.encoder().unwrap();
    enc.dispatch(&k, groups, &slices, &p).unwrap();
    enc.submit().unwrap().wait().unwrap();
    ybuf.read(0, y0.len()).unwrap()
}

#[test]
fn matvec_batch_matches_reference_and_each_token_alone() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(77);
    let variants = [
        MatmulVariant::Plain,
        MatmulVariant::Norm,
        MatmulVariant::Silu,
        MatmulVariant::SiluNorm,
    ];
    for dt in [WeightDtype::F16, WeightDtype::Bf16, WeightDtype::F32] {
        for (vi, &variant) in variants.iter().enumerate() {
            // Rows not a multiple of any workgroup's rows; cols with a padded tail.
            let (rows, cols, tokens) = (67u32, [200u32, 203][vi % 2], [1u32, 5, 16, 37][vi]);
            let (r, c) = (rows as usize, cols as usize);
            let s8 = stride8(cols);
            let x_stride4 = 2 * s8 + 1;
            let p = MatvecBatchPush {
                rows,
                cols,
                stride8: s8,
                accumulate: (variant == MatmulVariant::Plain) as u32,
                eps: 1e-5,
                tokens,
                x_stride4,
                y_stride: rows + 3,
                tokens_per_wg: 0,
                row_groups_y: 0,
            };
            let w = rng.vec(r * c, 1.0);
            let wb = rng.vec(r * c, 1.0);
            let nw = rng.vec(s8 as usize * 8, 1.5);
            let mut x = vec![0.0f32; tokens as usize * x_stride4 as usize * 4];
            for t in 0..tokens as usize {
                let at = t * x_stride4 as usize * 4;
                x[at..at + c].copy_from_slice(&rng.vec(c, 2.0));
            }
            let y0 = rng.vec(tokens as usize * p.y_stride as usize, 1.0);
            let (wbuf, wbbuf) = (
                weight_buffer(&d, dt, r, c, &w),
                weight_buffer(&d, dt, r, c, &wb),
            );
            let nbuf = f32_buffer(&d, "norm_w", &nw, ResourceClass::ReadOnlyWeight);
            let got = run_matvec_batch(&d, dt, variant, &p, &wbuf, &wbbuf, &x, &nbuf, &y0);
            let round = |v: &[f32]| v.iter().map(|&a| round_to(dt, a)).collect::<Vec<f32>>();
            let mp = MatmulPush {
                rows,
                cols,
                stride8: s8,
                tokens,
                x_stride: x_stride4 * 4,
                y_stride: p.y_stride,
                accumulate: p.accumulate,
                eps: p.eps,
            };
            let want = matmul_cpu(
                variant,
                &mp,
                &round(&w),
                Some(&round(&wb)),
                Some(&nw),
                &x,
                &y0,
            );
            let what = format!("matvec_batch {dt:?} {variant:?} tokens {tokens}");
            assert_nmse(&what, &got, &want, NMSE_MAX);
            // Token k alone: bit-identical to its row in the batch.
            for k in [0, tokens as usize / 2, tokens as usize - 1] {
                let xs = x_stride4 as usize * 4;
                let ys = p.y_stride as usize;
                let alone = run_matvec_batch(
                    &d,
                    dt,
                    variant,
                    &MatvecBatchPush { tokens: 1, ..p },
                    &wbuf,
                    &wbbuf,
                    &x[k * xs..(k + 1) * xs],
                    &nbuf,
                    &y0[k * ys..(k + 1) * ys],
                );
                let same = same_bits(&alone[..r], &got[k * ys..k * ys + r]);
                assert!(same, "{what}: token {k} differs alone vs batched");
            }
        }
    }
}

/// act_f16 then the cooperative-matrix batched matvec over `tokens` tokens (bindings as
/// the model's lowering makes them; `staged`: the staged kernel of that shape,
/// matvec_batch_cmt or matvec_batch_cmr, for every variant); returns y (tokens x y_stride).
#[allow(clippy::too_many_arguments)]
fn run_matvec_batch_cm(
    d: &Device,
    staged: Option<(StagedShape, bool)>,
    dt: WeightDtype,
    variant: MatmulVariant,
    p: &MatmulPush,
    w: &Buffer,
    wb: &Buffer,
    x: &[f32],
    nw: &Buffer,
    y0: &[f32],
) -> Vec<f32> {
    let padded = p.tokens.next_multiple_of(16);
    let xbuf = f32_buffer(d, "x", x, ResourceClass::TokenScratch);
    let ybuf = f32_buffer(d, "y", y0, ResourceClass::TokenScratch);
    let xh = u32_buffer(
        d,
        "xh",
        &vec![0x7e00_7e00; (padded * p.cols / 2) as usize],
        ResourceClass::TokenScratch,
    );
    let act = d.pipeline(&ACT_F16).unwrap();
    let mm = d
        .pipeline(matvec_batch_cm(dt, variant.has_silu(), p.rows).unwrap())
        .unwrap();
    let (push, groups) = MatvecBatchCmPush::new(dt, p.rows, p.cols, p.tokens);
    let mut enc = d.encoder().unwrap();
    enc.dispatch(
        &act,
        [padded, 1, 1],
        &[xbuf.slice(..), nw.slice(..), xh.slice(..)],
        &ActF16Push {
            cols: p.cols,
            tokens: p.tokens,
            x_stride: p.x_stride,
            h_words: p.cols / 2,
            norm: variant.has_norm() as u32,
            eps: p.eps,
        },
    )
    .unwrap();
    let mut slices = vec![w.slice(..)];
    if variant.has_silu() {
        slices.push(wb.slice(..));
    }
    slices.push(xh.slice(..));
    slices.push(ybuf.slice(..));
    // MatmulPush's accumulate (0 / 1) as Y_STORE / Y_ADD; Y_F16_PAIRS passes through.
    let push = MatvecBatchCmPush {
        y_stride: p.y_stride,
        y_mode: p.accumulate,
        ..push
    };
    if let Some((shape, both)) = staged {
        let gated = variant.has_silu();
        // `both`: the decode steps' kernels that take plain and gated matrices alike where
        // the shape has them; else the one-form kernels (prefill chunks).
        let lay = MatvecBatchCmtLayout {
            both,
            ..matvec_batch_staged_layout(shape, p.rows, p.cols, p.tokens, gated)
        };
        let part = f32_buffer(
            d,
            "part",
            &vec![f32::NAN; (lay.part_floats as usize).max(4)],
            ResourceClass::TokenScratch,
        );
        let tick = u32_buffer(
            d,
            "tick",
            &vec![0; lay.tickets as usize],
            ResourceClass::TokenScratch,
        );
        let k = d.pipeline(lay.kernel(dt, gated).unwrap()).unwrap();
        let mut push = push.staged(&lay);
        // The kernels of both forms take a gate/up pair as one range of one buffer (as the
        // model stores a layer's pair), the up from an aligned offset.
        let pair = (lay.both_forms(dt) && gated).then(|| {
            let gw = w.read::<u32>(0, (w.size() / 4) as usize).unwrap();
            let uw = wb.read::<u32>(0, (wb.size() / 4) as usize).unwrap();
            let up_at = gw.len().next_multiple_of(64); // u32s: 256 bytes
            let mut both = gw;
            both.resize(up_at, 0);
            both.extend(uw);
            push = push.with_up_at((up_at / 4) as u32);
            u32_buffer(d, "w|wb", &both, ResourceClass::ReadOnlyWeight)
        });
        if let Some(pair) = &pair {
            slices.splice(0..2, [pair.slice(..)]);
        }
        slices.extend([part.slice(..), tick.slice(..)]);
        enc.dispatch(&k, lay.groups, &slices, &push).unwrap();
        enc.submit().unwrap().wait().unwrap();
        let left = tick.read::<u32>(0, lay.tickets as usize).unwrap();
        assert!(
            left.iter().all(|&v| v == 0),
            "tickets left non-zero: {left:?}"
        );
        return ybuf.read(0, y0.len()).unwrap();
    }
    enc.dispatch(&mm, groups, &slices, &push).unwrap();
    enc.submit().unwrap().wait().unwrap();
    ybuf.read(0, y0.len()).unwrap()
}

#[test]
fn act_f16_matches_reference_and_pads_with_zeros() {
    let d = test_device();
    let _guard = ValidationGuard::new(&d);
    let mut rng = Rng::new(31);
    // One pass (rows of up to 4096 columns) and two (longer rows).
    for (cols, x_stride) in [(202u32, 207u32), (8202, 8207)] {
        let (tokens, padded) = (5u32, 16u32);
        let x = rng.vec((tokens * x_stride) as usize, 3.0);
        let nw = rng.vec(cols as usize, 1.5);
        let run = |norm: bool, tokens: u32, x: &[f32]| -> Vec<u32> {
            let p = ActF16Push {
                cols,
                tokens,
                x_stride,
                h_words: cols / 2,
                norm: norm as u32,
                eps: 1e-5,
            };
            run_act_f16(&d, x, &nw, p, padded)
        };
        let half = |w: u32, i: usize| half::f16::from_bits((w >> (16 * i)) as u16).to_f32();
        for norm in [false, true] {
            let got = run(norm, tokens, &x);
            for t in 0..padded as usize {
                let xo = t * x_stride as usize;
                let inv = if norm && t < tokens as usize {
                    let ss: f64 = x[xo..xo + cols as usize]
                        .iter()
                        .map(|&v| v as f64 * v as f64)
                        .sum();
                    1.0 / (ss / cols as f64 + 1e-5).sqrt()
                } else {
                    1.0
                };
                for c in 0..cols as usize {
                    let g = half(got[t * cols as usize / 2 + c / 2], c % 2);
                    let want = if t < tokens as usize {
                        let n = if norm { nw[c] as f64 } else { 1.0 };
                        (x[xo + c] as f64 * inv * n) as f32
                    } else {
                        0.0
                    };
                    // One f16 rounding of a value computed in f32.
                    let tol = want.abs() * 1.0e-3 + 1e-6;
                    assert!(
                        (g - want).abs() <= tol,
                        "cols {cols} norm {norm} token {t} col {c}: {g} vs {want}"
                    );
                }
            }
            // Token 3 alone: bit-identical to its row among the others.
            let xo = 3 * x_stride as usize;
            let alone = run(norm, 1, &x[xo..xo + x_stride as usize]);
            let w = cols as usize / 2;
            assert_eq!(
                &alone[..w],
                &got[3 * w..4 * w],
                "norm {norm}: token 3 alone"
            );
        }
    }
}

#[test]
fn matvec_batch_cm_fits_f16_and_block_tiles() {
    assert!(matvec_batch_cm_fits(WeightDtype::F16, 1024, 3072));
    assert!(!matvec_batch_cm_fits(WeightDtype::F16, 1000, 3072));
    assert!(!matvec_batch_cm_fits(WeightDtype::F16, 1024, 200));
    assert!(!matvec_batch_cm_fits(WeightDtype::Bf16, 1024, 3072));
    assert!(!matvec_batch_cm_fits(WeightDtype::F32, 1024, 3072));
    for dt in sluice_kernels::quant::QUANT_DTYPES {
        let block = dt.block_elems() as u32;
        assert!(matvec_batch_cm_fits(dt, 1024, 3072), "{dt:?}");
        assert!(!matvec_batch_cm_fits(dt, 1000, 3072), "{dt:?}");
        assert!(!matvec_batch_cm_fits(dt, 1024, 3072 + block / 2), "{dt:?}");
        assert!(matvec_batch_cm(dt, false, 1024).is_some());
        assert!(matvec_batch_cm(dt, true, 1024).is_some());
        assert_eq!(matvec_batch_cm_row_tiles(dt, 4096), 1);
        assert_eq!(matvec_batch_cm_groups(dt, 4096, 8), ([256, 1, 1], 256));
        assert_eq!(
            matvec_batch_cm_w_stride(dt, 3072),
            row_stride_field(dt, 3072)
        );
    }
    assert!(matvec_batch_cm(WeightDtype::Bf16, false, 1024).is_none());
    let f = WeightDtype::F16;
    assert_eq!(matvec_batch_cm_w_stride(f, 3072), 3072);
    assert_eq!(matvec_batch_cm_groups(f, 151936, 64), ([4748, 1, 1], 4748));
    assert_eq!(matvec_batch_cm_groups(f, 3072, 8), ([96, 1, 1], 96));
    assert_eq!(matvec_batch_cm_groups(f, 1024, 8), ([64, 1, 1], 64));
    assert_eq!(matvec_batch_cm_groups(f, 2048, 65), ([64, 2, 1], 64));
    assert_eq!(matvec_batch_cm_row_tiles(f, 2064), 1);
}

/// A device whose matrix units pass the self-test (no validation layer, as for the
/// prefill coopmat test); None, with a note, elsewhere (e.g. lavapipe).
fn coopmat_device() -> Option<Device> {
    let d = Device::new(sluice::Options::default()).expect("a Vulkan device");
    if !coopmat_self_test(&d).unwrap() {
        eprintln!("{}: no cooperative matrices; skipped", d.info().name);
        return None;
    }
    Some(d)
}

/// On the matrix units (skipped with a note elsewhere, e.g. lavapipe: no cooperative
/// matrices; no validation layer, as for the prefill coopmat test): every variant vs the
/// CPU reference (x rounded to f16 on the GPU side only: NMSE <= 1e-5), and each token
/// alone bit-identical to its row in the batch.
#[test]
fn matvec_batch_cm_matches_reference_and_each_token_alone() {
    let Some(d) = coopmat_device() else {
        return;
    };
    let shapes = [
        (96u32, 256u32, 1u32),
        (2080, 64, 3),
        (64, 1040, 5),
        (32, 512, 64),
        (32, 272, 70),
    ];
    let failures = check_batch_cm(&d, None, WeightDtype::F16, &shapes, 78);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The staged batched matvecs (operands staged through shared memory) on the matrix units,
/// matvec_batch_cmt and matvec_batch_cmr (each shape run with both), as the
/// matvec_batch_cm test, for f16 and every block format, plain and gated: vs the CPU
/// reference, each token alone bit-identical, the tickets back at zero. Shapes: a partial
/// last row group (2080 rows: 48 rows past the last 32, 32 past the last 64; 2080 = 130
/// gated groups of 16, 65 of 32), a partial last K chunk (272 or 1 block of 32 past
/// 128-column chunks; 1040 = 32.5 chunks of 32), K split 2 to 64 ways (few row groups),
/// two token groups (70 tokens), fewer rows than one row-owning workgroup (32, 48).
#[test]
fn matvec_batch_cmt_matches_reference_and_each_token_alone() {
    let Some(d) = coopmat_device() else {
        return;
    };
    assert_eq!(
        matvec_batch_cmt_layout(WeightDtype::F16, 64, 1040, 5, false).ksplit,
        3
    );
    assert_eq!(
        matvec_batch_cmt_layout(WeightDtype::F16, 32, 512, 64, false).ksplit,
        2
    );
    assert_eq!(
        matvec_batch_cmt_layout(WeightDtype::F16, 48, 4096, 33, false).ksplit,
        16
    );
    assert_eq!(
        matvec_batch_cmt_layout(WeightDtype::F16, 48, 4096, 33, true).ksplit,
        16
    );
    let shapes = [
        (96u32, 256u32, 1u32),
        (2080, 64, 3),
        (64, 1040, 5),
        (32, 512, 64),
        (32, 272, 70),
        (48, 4096, 33),
    ];
    let both = [StagedShape::KSteps, StagedShape::Rows];
    let rows = matvec_batch_staged_layout(StagedShape::Rows, 48, 4096, 33, false);
    assert_eq!((rows.ksplit, rows.kchunks), (64, 2));
    let mut failures = Vec::new();
    for shape in both {
        failures.extend(check_batch_cm(
            &d,
            Some((shape, true)),
            WeightDtype::F16,
            &shapes,
            79,
        ));
    }
    for (i, dt) in sluice_kernels::quant::QUANT_DTYPES.into_iter().enumerate() {
        let k = dt.block_elems() as u32;
        let shapes = [
            (96u32, 256u32.max(k), 1u32),
            (2080, k, 3),
            (64, 1024 + k, 5),
            (32, 512, 64),
            (48, 4096, 33),
            (32, 256, 70),
        ];
        for shape in both {
            failures.extend(check_batch_cm(
                &d,
                Some((shape, true)),
                dt,
                &shapes,
                120 + i as u64,
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn matvec_batch_cmt_layout_splits_k_only_for_few_row_groups() {
    // Qwen3-0.6B: qkv keeps K whole (128 row groups), o and down split it into about one
    // wave of 128 workgroups (the H100 keeps one of these per multiprocessor).
    let qkv = matvec_batch_cmt_layout(WeightDtype::F16, 4096, 1024, 32, false);
    assert_eq!(
        (qkv.ksplit, qkv.groups, qkv.part_floats),
        (1, [128, 1, 1], 0)
    );
    let o = matvec_batch_cmt_layout(WeightDtype::F16, 1024, 2048, 32, false);
    assert_eq!((o.ksplit, o.kchunks, o.groups), (4, 4, [32, 4, 1]));
    assert_eq!(o.part_floats, 32 * 4 * 2048);
    let down = matvec_batch_cmt_layout(WeightDtype::F16, 1024, 3072, 70, false);
    assert_eq!(
        (down.ksplit, down.groups, down.tickets),
        (4, [32, 8, 1], 64)
    );
    // The split depends on the shape, never on the tokens (batch invariance).
    for t in [1, 8, 64, 65, 512] {
        assert_eq!(
            matvec_batch_cmt_layout(WeightDtype::F16, 1024, 3072, t, false).ksplit,
            4
        );
        assert_eq!(
            matvec_batch_cmt_layout(WeightDtype::F16, 1024, 3072, t, false).kchunks,
            6
        );
    }
    assert_eq!(qkv.shape, StagedShape::KSteps);
    // From 8 Mi f16 weights (2^21 of block formats, 2^22 of a gate/up pair) the row-owning
    // kernel, 64 rows per workgroup: the LM head, K whole; qwen3-4b's down (2560 x 9728),
    // split to ~264 workgroups, its qkv (6144 x 2560) and o (2560 x 4096, 10.5 M);
    // qwen3-0.6b's gate/up pair (6.3 M); its qkv (4096 x 1024, 4.2 M) and o (1024 x 2048,
    // 2 M) only in a block format; a 1024 x 1024 block-format matrix never.
    use StagedShape::{KSteps, Rows};
    let (f16, q4k) = (WeightDtype::F16, WeightDtype::Q4K);
    for (dt, rows, cols, gated, want) in [
        (q4k, 2560, 4096, false, Rows),
        (f16, 2560, 4096, false, Rows),
        (f16, 6144, 2560, false, Rows),
        (q4k, 3072, 1024, true, Rows),
        (f16, 3072, 1024, true, Rows),
        (f16, 1536, 576, true, KSteps),
        (q4k, 4096, 1024, false, Rows),
        (f16, 4096, 1024, false, KSteps),
        (q4k, 1024, 2048, false, Rows),
        (q4k, 1024, 1024, false, KSteps),
    ] {
        let got = matvec_batch_cmt_layout(dt, rows, cols, 32, gated).shape;
        assert_eq!(got, want, "{} {rows} x {cols} gated {gated}", dt.name());
    }
    let head = matvec_batch_cmt_layout(WeightDtype::F16, 151936, 1024, 64, false);
    assert_eq!(
        (head.shape, head.ksplit, head.groups),
        (StagedShape::Rows, 1, [2374, 1, 1])
    );
    let down4b = matvec_batch_cmt_layout(WeightDtype::F16, 2560, 9728, 32, false);
    assert_eq!(
        (down4b.shape, down4b.ksplit, down4b.kchunks),
        (StagedShape::Rows, 7, 44)
    );
    assert_eq!(down4b.part_floats, 40 * 7 * 4096);
    let gate4b = matvec_batch_cmt_layout(WeightDtype::F16, 9728, 2560, 32, true);
    assert_eq!(
        (gate4b.shape, gate4b.ksplit, gate4b.groups),
        (StagedShape::Rows, 1, [304, 1, 1])
    );
    // Gated: 16 rows of each matrix per workgroup of matvec_batch_cmt (a 3072-row pair: 192
    // groups, K whole), 32 of matvec_batch_cmr (96 groups, K split three ways).
    let gate = matvec_batch_staged_layout(KSteps, 3072, 1024, 64, true);
    assert_eq!((gate.ksplit, gate.groups), (1, [192, 1, 1]));
    let gate = matvec_batch_cmt_layout(WeightDtype::F16, 3072, 1024, 64, true);
    assert_eq!(
        (gate.shape, gate.ksplit, gate.groups),
        (Rows, 3, [96, 3, 1])
    );
    assert!(matvec_batch_cmt_fits(f16, 1024, 3072));
    assert!(!matvec_batch_cmt_fits(f16, 1000, 3072));
    assert!(!matvec_batch_cmt_fits(f16, 1024, 200));
    assert!(matvec_batch_cmt_fits(WeightDtype::Q4K, 1024, 3072));
    assert!(!matvec_batch_cmt_fits(WeightDtype::Q4K, 1024, 3072 + 32));
    assert!(matvec_batch_cmt_fits(WeightDtype::Q8_0, 1024, 3072 + 32));
    assert!(!matvec_batch_cmt_fits(WeightDtype::Bf16, 1024, 3072));
}

/// The block formats on the matrix units (weights decoded into shared memory as f16), as
/// the f16 test: vs the CPU reference on the dequantized weights rounded to f16, each
/// token alone bit-identical. Shapes: one K step per subgroup and subgroups with none
/// (96 columns of 32-element blocks), several steps per subgroup, 2 and 5 token tiles.
#[test]
fn matvec_batch_cm_block_formats_match_reference_and_each_token_alone() {
    let Some(d) = coopmat_device() else {
        return;
    };
    let mut failures = Vec::new();
    for (i, dt) in sluice_kernels::quant::QUANT_DTYPES.into_iter().enumerate() {
        let k = if dt.block_elems() == 256 { 256 } else { 32 };
        let shapes = [
            (96u32, 3 * k, 1u32),
            (2080, k, 3),
            (64, 5 * k.max(256), 5),
            (32, 2 * k, 64),
            (32, k, 70),
        ];
        failures.extend(check_batch_cm(&d, None, dt, &shapes, 90 + i as u64));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every variant of the cooperative-matrix batched matvec for `dt` at `shapes` (rows,
/// cols, tokens): the failures (NMSE above 1e-5, a token alone not bit-identical).
fn check_batch_cm(
    d: &Device,
    staged: Option<(StagedShape, bool)>,
    dt: WeightDtype,
    shapes: &[(u32, u32, u32)],
    seed: u64,
) -> Vec<String> {
    check_batch_cm_of(d, staged, dt, &MatmulVariant::ALL, shapes, seed)
}

/// [`check_batch_cm`] for the `variants` given.
fn check_batch_cm_of(
    d: &Device,
    staged: Option<(StagedShape, bool)>,
    dt: WeightDtype,
    variants: &[MatmulVariant],
    shapes: &[(u32, u32, u32)],
    seed: u64,
) -> Vec<String> {
    let mut rng = Rng::new(seed);
    let mut failures = Vec::new();
    for (vi, &variant) in variants.iter().enumerate() {
        for &(rows, cols, tokens) in shapes {
            let (r, c) = (rows as usize, cols as usize);
            let s8 = stride8(cols);
            let x_stride = cols + 4 * (vi as u32 + 1);
            let p = MatmulPush {
                rows,
                cols,
                stride8: s8,
                tokens,
                x_stride,
                y_stride: rows + 5,
                accumulate: (variant == MatmulVariant::Plain) as u32,
                eps: 1e-5,
            };
            let w = rng.vec(r * c, 1.0);
            let wb = rng.vec(r * c, 1.0);
            let nw = rng.vec(c, 1.5);
            let x = rng.vec(tokens as usize * x_stride as usize, 2.0);
            let y0 = rng.vec(tokens as usize * p.y_stride as usize, 1.0);
            let (wbuf, wbbuf) = (
                weight_buffer(d, dt, r, c, &w),
                weight_buffer(d, dt, r, c, &wb),
            );
            let nbuf = f32_buffer(d, "norm_w", &nw, ResourceClass::ReadOnlyWeight);
            let got =
                run_matvec_batch_cm(d, staged, dt, variant, &p, &wbuf, &wbbuf, &x, &nbuf, &y0);
            // What the kernel multiplies: the decoded weights as f16.
            let round = |v: &[f32]| {
                let deq = if dt.is_quantized() {
                    dequantize(dt, r, c, &quantize(dt, r, c, v))
                } else {
                    v.to_vec()
                };
                let f16 = WeightDtype::F16;
                deq.iter().map(|&a| round_to(f16, a)).collect::<Vec<f32>>()
            };
            let want = matmul_cpu(
                variant,
                &p,
                &round(&w),
                Some(&round(&wb)),
                Some(&nw),
                &x,
                &y0,
            );
            let what = format!(
                "matvec_batch_{} {} {variant:?} {rows}x{cols} tokens {tokens}",
                match staged {
                    None => "cm",
                    Some((StagedShape::KSteps, _)) => "cmt",
                    Some((StagedShape::Rows, _)) => "cmr",
                    Some((StagedShape::Registers, true)) => "cmd (both forms)",
                    Some((StagedShape::Registers, false)) => "cmd",
                    Some((StagedShape::RegistersF16, true)) => "cmdk (both forms)",
                    Some((StagedShape::RegistersF16, false)) => "cmdk",
                },
                dt.name()
            );
            let e = nmse(&got, &want);
            println!("{what}: NMSE {e:e}");
            if e > 1e-5 {
                failures.push(format!("{what}: NMSE {e:e}"));
            }
            // Gated: y as f16 pairs (the down projection's input) is bit for bit ACT_F16
            // of the f32 y; the word after each token's rows untouched.
            if variant.has_silu() {
                let h_stride = rows + 6;
                let p16 = MatmulPush {
                    y_stride: h_stride,
                    accumulate: Y_F16_PAIRS,
                    ..p
                };
                let words = (tokens * h_stride / 2) as usize;
                let y16 = vec![f32::from_bits(!0); words];
                let got16: Vec<u32> = run_matvec_batch_cm(
                    d, staged, dt, variant, &p16, &wbuf, &wbbuf, &x, &nbuf, &y16,
                )
                .iter()
                .map(|v| v.to_bits())
                .collect();
                let want16 = act_f16_words(d, &got, rows, tokens, p.y_stride, h_stride / 2);
                for t in 0..tokens as usize {
                    let at = t * h_stride as usize / 2;
                    let row = at..at + r / 2;
                    if got16[row.clone()] != want16[row] {
                        failures.push(format!(
                            "{what}: f16 pairs of token {t} differ from act_f16"
                        ));
                    } else if got16[at + r / 2] != !0 {
                        failures.push(format!("{what}: f16 pairs: gap after token {t} written"));
                    }
                }
            }
            for k in [0, tokens as usize / 2, tokens as usize - 1] {
                let (xs, ys) = (x_stride as usize, p.y_stride as usize);
                let alone = run_matvec_batch_cm(
                    d,
                    staged,
                    dt,
                    variant,
                    &MatmulPush { tokens: 1, ..p },
                    &wbuf,
                    &wbbuf,
                    &x[k * xs..(k + 1) * xs],
                    &nbuf,
                    &y0[k * ys..(k + 1) * ys],
                );
                let same = same_bits(&alone[..r], &got[k * ys..k * ys + r]);
                if !same {
                    failures.push(format!("{what}: token {k} differs alone vs batched"));
                }
            }
        }
    }
    failures
}

/// `matvec_batch_cmd_f16` and its 64-token form `matvec_batch_cmd64_f16` (the weights'
/// matrix-unit operands built in registers, K permuted per 32-column chunk;
/// wgsl/include/matvec_batch_cmd_f16_body.wgsl) against CPU dot products of the
/// f16-rounded operands (NMSE <= 1e-5), stored and added: a partial last row group (2080 =
/// 32.5 groups of 64), a partial last staged block and chunk (1040 = 8 blocks of 128 + 16
/// columns), one to three token groups (33 and 130 tokens), strides past the rows; the
/// last token alone bit for bit its batch row. On the matrix units only; elsewhere the
/// kernels are refused.
#[test]
fn matvec_batch_cmd_f16_matches_reference() {
    let f16 = WeightDtype::F16;
    assert!(matvec_batch_cmd_fits(f16, 151936, 1024, false, Y_STORE));
    assert!(!matvec_batch_cmd_fits(f16, 9728, 2560, false, Y_STORE));
    assert!(!matvec_batch_cmd_fits(f16, 151936, 1024, true, Y_STORE));
    assert!(!matvec_batch_cmd_fits(
        WeightDtype::Q6K,
        151936,
        1024,
        false,
        Y_STORE
    ));
    let Some(d) = register_built_device(&[&MATVEC_BATCH_CMD_F16, &MATVEC_BATCH_CMD64_F16]) else {
        return;
    };
    // The LM heads' kernel and the prefill chunks' 64-token form.
    let kernels = [
        (&MATVEC_BATCH_CMD_F16, 32u32),
        (&MATVEC_BATCH_CMD64_F16, 64),
    ];
    let cases = [
        (64u32, 128u32, 1u32, Y_STORE),
        (2080, 96, 3, Y_ADD),
        (96, 1040, 17, Y_STORE),
        (48, 4096, 33, Y_ADD),
        (80, 256, 130, Y_ADD),
    ];
    let failures = check_cmd_f16_kernels(&d, 131, &kernels, &cases, false);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// [`check_f16_kernel`] for every case on each of the register-built f16 `kernels` (with
/// their tokens a workgroup), dispatched by `matvec_batch_cmd_groups`.
fn check_cmd_f16_kernels(
    d: &Device,
    seed: u64,
    kernels: &[(&sluice::KernelDesc, u32)],
    cases: &[(u32, u32, u32, u32)],
    gated: bool,
) -> Vec<String> {
    let mut rng = Rng::new(seed);
    let mut failures = Vec::new();
    for &(kd, per_group) in kernels {
        for &case in cases {
            let groups = |tokens| matvec_batch_cmd_groups(per_group, case.0, tokens, gated);
            check_f16_kernel(d, &mut rng, kd, groups, gated, case, &mut failures);
        }
    }
    failures
}

/// Each case `(rows, cols, tokens, gated, y mode, want)` of a prefill kernel rule: `pick`
/// of the first five is `want`.
fn assert_picks<T: PartialEq + std::fmt::Debug>(
    cases: &[(u32, u32, u32, bool, u32, T)],
    pick: impl Fn(u32, u32, u32, bool, u32) -> T,
) {
    for (rows, cols, tokens, gated, mode, want) in cases {
        assert_eq!(
            &pick(*rows, *cols, *tokens, *gated, *mode),
            want,
            "{rows}x{cols} at {tokens} tokens, gated {gated}, y mode {mode}"
        );
    }
}

/// `matvec_batch_cmd_prefill`'s choice (f16 only, enough workgroups without a K split, the
/// y modes each kernel writes) and `matvec_batch_cmd_f16_silu` (a prefill chunk's gated f16
/// gate/up, weights' operands built in registers) against the CPU reference: silu(g) * u
/// as f16 pairs and as f32 (NMSE <= 1e-5), partial row groups (48 rows: 1.5 groups of 32,
/// 1040 columns: a partial 128-column stage), one to three token groups, the last token
/// alone bit for bit its batch row. On the matrix units where `cmd_layout_self_test`
/// passes; elsewhere the kernel is refused.
#[test]
fn matvec_batch_cmd_f16_silu_matches_reference() {
    let f16 = WeightDtype::F16;
    let pick = |rows, cols, tokens, gated, mode| {
        matvec_batch_cmd_prefill(f16, rows, cols, tokens, gated, mode).map(|(k, n)| (k.name, n))
    };
    let (c32, c64) = (
        Some((MATVEC_BATCH_CMD_F16.name, 32)),
        Some((MATVEC_BATCH_CMD64_F16.name, 64)),
    );
    let (g32, g64) = (
        Some((MATVEC_BATCH_CMD_F16_SILU.name, 32)),
        Some((MATVEC_BATCH_CMD64_F16_SILU.name, 64)),
    );
    // (rows, cols, tokens, gated, y mode, the kernel and its tokens a workgroup)
    let cases = [
        // qwen3-0.6b's gate/up at 512 tokens: 96 row groups x 8 token groups of 64; at 128,
        // 96 x 2 of 64 too few, 96 x 4 of 32 enough.
        (3072, 1024, 512, true, Y_F16_PAIRS, g64),
        (3072, 1024, 128, true, Y_STORE, g32),
        // Its o at 512 tokens: 16 x 8 groups of 64 too few, 16 x 16 of 32 enough; at 128
        // (16 x 4) and 480 (16 x 15) too few without a K split.
        (1024, 2048, 512, false, Y_ADD, c32),
        (1024, 2048, 128, false, Y_ADD, None),
        (1024, 2048, 480, false, Y_ADD, None),
        // qwen3-4b's down at 512 tokens: 40 x 8 = 320 of 64 (a second wave mostly empty),
        // 40 x 16 of 32.
        (2560, 9728, 512, false, Y_ADD, c32),
        // qwen3-0.6b's qkv at 512 and 256 tokens: 64 x 8 and 64 x 4 of 64, full waves;
        // qwen3-4b's at 256: 96 x 4 = 384, a second wave under half full: 32 (96 x 8).
        (4096, 1024, 512, false, Y_STORE, c64),
        (4096, 1024, 256, false, Y_STORE, c64),
        (6144, 2560, 256, false, Y_STORE, c32),
        // Llama 3.2 1B's down at 512 tokens: 32 x 8 = 256 groups of 64, one wave.
        (2048, 8192, 512, false, Y_ADD, c64),
        // y modes the kernels do not write; columns not a multiple of 16.
        (3072, 1024, 512, true, Y_ADD, None),
        (1024, 2048, 512, false, Y_F16_PAIRS, None),
        (1024, 2056, 512, false, Y_STORE, None),
    ];
    assert_picks(&cases, pick);
    assert!(matvec_batch_cmd64_waves_full(2432) && matvec_batch_cmd64_waves_full(512));
    assert!(!matvec_batch_cmd64_waves_full(320) && !matvec_batch_cmd64_waves_full(128));
    assert!(
        matvec_batch_cmd_prefill(WeightDtype::Q4K, 9728, 2560, 512, true, Y_F16_PAIRS).is_none()
    );
    let Some(d) =
        register_built_device(&[&MATVEC_BATCH_CMD_F16_SILU, &MATVEC_BATCH_CMD64_F16_SILU])
    else {
        return;
    };
    let kernels = [
        (&MATVEC_BATCH_CMD_F16_SILU, 32u32),
        (&MATVEC_BATCH_CMD64_F16_SILU, 64),
    ];
    let cases = [
        (48u32, 128u32, 33u32, Y_F16_PAIRS),
        (64, 1040, 17, Y_STORE),
        (160, 256, 70, Y_F16_PAIRS),
        (32, 512, 1, Y_STORE),
    ];
    let failures = check_cmd_f16_kernels(&d, 137, &kernels, &cases, true);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `matmul_tile_f16` and `matmul_tile_f16_silu` (a prefill chunk's f16 matrices as tiled
/// matmuls, wgsl/include/matmul_tile_f16_body.wgsl) against the CPU reference (NMSE <=
/// 1e-5): y stored and added to, gated silu(g) * u as f16 pairs and f32, partial row and
/// token tiles (200 rows: 1.6 tiles of 128; 72 gated: 1.1 of 64; 1 to 300 tokens), columns
/// not a multiple of the 64-column step (1048), strides past the columns; the last token
/// alone bit for bit its batch row. `matmul_tile_prefill`'s choice. On the matrix units;
/// a device without them refuses the kernels by name.
#[test]
fn matmul_tile_f16_matches_reference() {
    let f16 = WeightDtype::F16;
    let pick = |rows, cols, tokens, gated, mode| {
        matmul_tile_prefill(f16, rows, cols, tokens, gated, mode).map(|k| k.name)
    };
    let (plain, silu) = (Some(MATMUL_TILE_F16.name), Some(MATMUL_TILE_F16_SILU.name));
    // (rows, cols, tokens, gated, y mode, the kernel)
    let cases = [
        // qwen3-4b's o at 512 tokens: 20 x 4 workgroups; qwen3-0.6b's at 512 (8 x 4) and
        // 1024 (8 x 8) too few; its qkv at 512, 32 x 4.
        (2560, 4096, 512, false, Y_ADD, plain),
        (1024, 2048, 512, false, Y_ADD, None),
        (1024, 2048, 1024, false, Y_ADD, None),
        (4096, 1024, 512, false, Y_STORE, plain),
        // qwen3-0.6b's gate/up at 512 tokens (48 x 4) and at 128 (48 x 1).
        (3072, 1024, 512, true, Y_F16_PAIRS, silu),
        (3072, 1024, 128, true, Y_F16_PAIRS, None),
        // y modes the kernels do not write; columns not a multiple of 8; block formats.
        (4096, 1024, 512, false, Y_F16_PAIRS, None),
        (3072, 1024, 512, true, Y_ADD, None),
        (4096, 1028, 512, false, Y_STORE, None),
    ];
    assert_picks(&cases, pick);
    assert!(matmul_tile_prefill(WeightDtype::Q4K, 4096, 1024, 512, false, Y_STORE).is_none());
    assert_eq!(matmul_tile_groups(200, 300, false), ([3, 2, 1], 2));
    assert_eq!(matmul_tile_groups(72, 1, true), ([1, 2, 1], 2));
    let Some(d) = coopmat_device() else {
        // Refused for the matrix units or for its 44 KiB of workgroup memory.
        let d = Device::new(sluice::Options::default()).expect("a Vulkan device");
        assert!(d.pipeline(&MATMUL_TILE_F16).is_err());
        assert!(d.pipeline(&MATMUL_TILE_F16_SILU).is_err());
        return;
    };
    let mut rng = Rng::new(139);
    let mut failures = Vec::new();
    // (gated, rows, cols, tokens, y mode)
    let cases = [
        (false, 128u32, 64u32, 1u32, Y_STORE),
        (false, 200, 1048, 130, Y_ADD),
        (false, 64, 2560, 300, Y_STORE),
        (true, 72, 1048, 129, Y_F16_PAIRS),
        (true, 128, 256, 64, Y_STORE),
        (true, 16, 32, 3, Y_F16_PAIRS),
    ];
    for (gated, rows, cols, tokens, y_mode) in cases {
        let kd = if gated {
            &MATMUL_TILE_F16_SILU
        } else {
            &MATMUL_TILE_F16
        };
        let groups = |tokens| matmul_tile_groups(rows, tokens, gated);
        let case = (rows, cols, tokens, y_mode);
        check_f16_kernel(&d, &mut rng, kd, groups, gated, case, &mut failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `matvec_batch_cmd_q4_k[_silu]` and `matvec_batch_cmd_q6_k` (the weights'
/// matrix-unit operands built in registers; wgsl/include/matvec_batch_cmdq_body.wgsl)
/// through the staged kernels' check (Q6_K: the variants without a gate): every variant
/// against the CPU reference on the dequantized weights rounded to f16 (NMSE <= 1e-5),
/// gated f16 pairs bit for bit act_f16's, tokens alone bit-identical to their batch rows.
/// Shapes: partial last row groups (96 rows: 1.5 groups of 64; 48 gated: 1.5 of 32), one
/// block per row, K split (1280 = 5 blocks, 4096 = 16: 8 splits), one to three token
/// groups of 32 (33, 64 and 70 tokens: more tokens run as more groups). On
/// the matrix units where `cmd_layout_self_test` passes; a device without matrix units
/// refuses the kernels by name.
#[test]
fn matvec_batch_cmdq_matches_reference_and_each_token_alone() {
    let (q, q6) = (WeightDtype::Q4K, WeightDtype::Q6K);
    assert!(matvec_batch_cmdq_fits(q, 9728, 2560, true));
    assert!(matvec_batch_cmdq_fits(q6, 2560, 9728, false));
    assert!(!matvec_batch_cmdq_fits(q6, 9728, 2560, true));
    assert!(!matvec_batch_cmdq_fits(WeightDtype::Q5K, 2560, 9728, false));
    assert!(!matvec_batch_cmdq_fits(q, 9728, 2560 + 32, false));
    assert!(!matvec_batch_cmdq_fits(q, 9720, 2560, false));
    // qwen3-4b's down: 40 row groups x 7 splits of 6 blocks (38 blocks).
    let down = matvec_batch_staged_layout(StagedShape::Registers, 2560, 9728, 32, false);
    assert_eq!((down.ksplit, down.kchunks, down.groups), (7, 6, [40, 7, 1]));
    assert_eq!(down.part_floats, 40 * 7 * 2048);
    // Its gate/up: 304 row groups of 32, K whole; 64 tokens: two token groups.
    let gate = matvec_batch_staged_layout(StagedShape::Registers, 9728, 2560, 64, true);
    assert_eq!(
        (gate.ksplit, gate.groups, gate.part_floats),
        (1, [304, 2, 1], 0)
    );
    // A prefill chunk of 512 tokens: the same down with K whole (40 row groups x 16 token
    // groups); of 64 tokens (40 x 2 groups) the engine's split.
    let whole = matvec_batch_cmdq_prefill_layout(2560, 9728, 512, false);
    assert_eq!(
        (whole.ksplit, whole.groups, whole.part_floats),
        (1, [40, 16, 1], 0)
    );
    assert_eq!(
        matvec_batch_cmdq_prefill_layout(2560, 9728, 64, false).ksplit,
        7
    );
    // Decode steps and prefill chunks run Q4_K on the kernel of both forms (the plain
    // bindings, a gate/up pair as one range with the up's vec4 offset in push field
    // `gated`); Q6_K, and Q4_K where `both` is cleared, on the one-form kernels.
    let name = |lay: &MatvecBatchCmtLayout, dt, gated| lay.kernel(dt, gated).unwrap().name;
    assert!(down.both_forms(q) && !down.both_forms(q6) && down.both);
    assert_eq!(name(&down, q, false), "matvec_batch_cmd_q4_k_both");
    assert_eq!(name(&gate, q, true), "matvec_batch_cmd_q4_k_both");
    assert_eq!(name(&down, q6, false), "matvec_batch_cmd_q6_k");
    let push = |rows, cols, lay: &MatvecBatchCmtLayout| {
        MatvecBatchCmPush::new(q, rows, cols, 32)
            .0
            .staged(lay)
            .gated
    };
    assert_eq!((push(2560, 9728, &down), push(9728, 2560, &gate)), (0, 1));
    let pair = MatvecBatchCmPush::new(q, 9728, 2560, 32).0.staged(&gate);
    assert_eq!(pair.with_up_at(875_536).gated, 875_536);
    for tokens in [512, 64] {
        let pre = matvec_batch_cmdq_prefill_layout(9728, 2560, tokens, true);
        assert!(pre.both_forms(q));
        assert_eq!(name(&pre, q, true), "matvec_batch_cmd_q4_k_both");
        let one = MatvecBatchCmtLayout { both: false, ..pre };
        assert_eq!(name(&one, q, true), "matvec_batch_cmd_q4_k_silu");
        let pre = matvec_batch_cmdq_prefill_layout(2560, 9728, tokens, false);
        assert_eq!(name(&pre, q, false), "matvec_batch_cmd_q4_k_both");
        let one = MatvecBatchCmtLayout { both: false, ..pre };
        assert_eq!(name(&one, q, false), "matvec_batch_cmd_q4_k");
    }
    let Some(d) = register_built_device(&[
        &MATVEC_BATCH_CMD_Q4_K,
        &MATVEC_BATCH_CMD_Q4_K_SILU,
        &MATVEC_BATCH_CMD_Q4_K_BOTH,
        &MATVEC_BATCH_CMD_Q6_K,
    ]) else {
        return;
    };
    let shapes = [
        (96u32, 256u32, 1u32),
        (2080, 256, 3),
        (64, 1280, 5),
        (32, 512, 64),
        (48, 4096, 33),
        (32, 256, 70),
    ];
    let plain = [MatmulVariant::Plain, MatmulVariant::Norm];
    let mut failures = Vec::new();
    // Q4_K on the kernel of both forms and on the one-form kernels (a gate/up pair the
    // model cannot bind as one range).
    for both in [true, false] {
        let shape = Some((StagedShape::Registers, both));
        failures.extend(check_batch_cm(&d, shape, q, &shapes, 141));
    }
    let shape = Some((StagedShape::Registers, true));
    failures.extend(check_batch_cm_of(&d, shape, q6, &plain, &shapes, 142));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `matvec_batch_cmdk_f16[_silu]` (the register-built f16 kernel with K split over
/// workgroups: the batched engine's f16 matrices from 2048 rows) in every variant against
/// the CPU reference (NMSE <= 1e-5), gated f16 pairs bit for bit act_f16's, three tokens
/// alone bit for bit their batch rows: K split 1 to 8 ways, a split's last stage partial
/// (1040 columns), a partial row group, one to three token groups, rows of 2080 (more row
/// groups than splits wanted: K whole).
#[test]
fn matvec_batch_cmdk_f16_matches_reference_and_each_token_alone() {
    let f16 = WeightDtype::F16;
    assert!(matvec_batch_cmdk_f16_fits(f16, 4096, 1024));
    assert!(matvec_batch_cmdk_f16_fits(f16, 2048, 1040));
    assert!(!matvec_batch_cmdk_f16_fits(f16, 1024, 3072));
    assert!(!matvec_batch_cmdk_f16_fits(f16, 4096, 1000));
    assert!(!matvec_batch_cmdk_f16_fits(WeightDtype::Q4K, 4096, 1024));
    // qwen3-0.6b's qkv at 32 tokens: 64 row groups x 4 splits of 2 stages (128 columns).
    let qkv = matvec_batch_staged_layout(StagedShape::RegistersF16, 4096, 1024, 32, false);
    assert_eq!((qkv.ksplit, qkv.kchunks, qkv.groups), (4, 2, [64, 4, 1]));
    assert_eq!(qkv.part_floats, 64 * 4 * 2048);
    // Decode steps on the kernel of both forms.
    assert!(qkv.both_forms(f16) && !qkv.both_forms(WeightDtype::Q4K));
    assert_eq!(
        qkv.kernel(f16, false).unwrap().name,
        "matvec_batch_cmdk_f16_both"
    );
    let one = MatvecBatchCmtLayout { both: false, ..qkv };
    assert_eq!(
        one.kernel(f16, false).unwrap().name,
        "matvec_batch_cmdk_f16"
    );
    assert_eq!(
        one.kernel(f16, true).unwrap().name,
        "matvec_batch_cmdk_f16_silu"
    );
    // Its 1024-row o splits down to single stages (16 x 16).
    let o = matvec_batch_staged_layout(StagedShape::RegistersF16, 1024, 2048, 64, false);
    assert_eq!((o.ksplit, o.kchunks, o.groups), (16, 1, [16, 32, 1]));
    let Some(d) = register_built_device(&[
        &MATVEC_BATCH_CMDK_F16,
        &MATVEC_BATCH_CMDK_F16_SILU,
        &MATVEC_BATCH_CMDK_F16_BOTH,
    ]) else {
        return;
    };
    let shapes = [
        (96u32, 256u32, 1u32),
        (2080, 64, 3),
        (64, 1040, 5),
        (32, 512, 64),
        (48, 4096, 33),
        (32, 272, 70),
    ];
    let mut failures = Vec::new();
    for both in [true, false] {
        let shape = Some((StagedShape::RegistersF16, both));
        failures.extend(check_batch_cm(&d, shape, f16, &shapes, 143));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One case `(rows, cols, tokens, y mode)` of an f16 matrix-unit kernel with the
/// register-built matvecs' bindings and push constants (`matvec_batch_cmd[64]_f16[_silu]`,
/// `matmul_tile_f16[_silu]`; dispatch `groups(tokens)`) against the CPU reference: y = W . x
/// stored or added to y's values, or (`gated`) silu(Wg . x) * (Wu . x) as f16 pairs or f32,
/// activations and y with strides past the columns and rows. Pushed to `failures`: an NMSE
/// above 1e-5 over the written elements, an f32 element past a token's rows written, the
/// last token alone not bit for bit its batch row (batch invariance).
fn check_f16_kernel(
    d: &Device,
    rng: &mut Rng,
    kd: &sluice::KernelDesc,
    groups: impl Fn(u32) -> ([u32; 3], u32),
    gated: bool,
    (rows, cols, tokens, y_mode): (u32, u32, u32, u32),
    failures: &mut Vec<String>,
) {
    let f16 = WeightDtype::F16;
    let k = d.pipeline(kd).unwrap();
    let (r, c, n) = (rows as usize, cols as usize, tokens as usize);
    let pairs = y_mode == Y_F16_PAIRS;
    let x_stride = cols + 8;
    // f32 elements, or halves (Y_F16_PAIRS: even), between tokens' y.
    let y_stride = rows + if pairs { 6 } else { 5 };
    let ys = y_stride as usize;
    let wg = rng.vec(r * c, 1.0);
    let wu = if gated {
        rng.vec(r * c, 1.0)
    } else {
        Vec::new()
    };
    let (x, words) = f16_activations(rng, n * x_stride as usize);
    let y0 = rng.vec(n * ys, 1.0);
    let gbuf = weight_buffer(d, f16, r, c, &wg);
    let ubuf = gated.then(|| weight_buffer(d, f16, r, c, &wu));
    // y of `tokens` tokens from x words `xw`, y starting as `y_init` (f32 modes) or zeros.
    let run = |tokens: u32, xw: &[u32], y_init: &[f32]| -> Vec<f32> {
        let nw = if pairs {
            tokens as usize * ys / 2
        } else {
            tokens as usize * ys
        };
        let init: Vec<u32> = if pairs {
            vec![0u32; nw]
        } else {
            y_init[..nw].iter().map(|v| v.to_bits()).collect()
        };
        let xbuf = u32_buffer(d, "xh", xw, ResourceClass::TokenScratch);
        let ybuf = u32_buffer(d, "y", &init, ResourceClass::TokenScratch);
        let (g, gx) = groups(tokens);
        let p = MatvecBatchCmPush {
            rows,
            cols,
            w_stride: matvec_batch_cm_w_stride(f16, cols),
            tokens,
            x_stride,
            y_stride,
            y_mode,
            row_groups_x: gx,
        };
        let mut b = vec![gbuf.slice(..)];
        b.extend(ubuf.as_ref().map(|u| u.slice(..)));
        b.extend([xbuf.slice(..), ybuf.slice(..)]);
        let mut enc = d.encoder().unwrap();
        enc.dispatch(&k, g, &b, &p).unwrap();
        enc.submit().unwrap().wait().unwrap();
        y_values(ybuf.read::<u32>(0, nw).unwrap(), pairs)
    };
    let got = run(tokens, &words, &y0);
    assert_eq!(got.len(), n * ys);
    let name = kd.name;
    let mut want = vec![0.0f32; n * r];
    let mut have = vec![0.0f32; n * r];
    for t in 0..n {
        let xt = &x[t * x_stride as usize..];
        for row in 0..r {
            let dot =
                |w: &[f32]| -> f32 { (0..c).map(|i| round_to(f16, w[row * c + i]) * xt[i]).sum() };
            let o = t * ys + row;
            want[t * r + row] = if gated {
                let (g, u) = (dot(&wg), dot(&wu));
                g / (1.0 + (-g).exp()) * u
            } else if y_mode == Y_ADD {
                y0[o] + dot(&wg)
            } else {
                dot(&wg)
            };
            have[t * r + row] = got[o];
        }
        if !pairs && bits(&got[t * ys + r..(t + 1) * ys]) != bits(&y0[t * ys + r..(t + 1) * ys]) {
            failures.push(format!(
                "{name} {rows}x{cols}: token {t}'s y past its rows written"
            ));
        }
    }
    let e = nmse(&have, &want);
    println!("{name} {rows}x{cols} tokens {tokens} mode {y_mode}: NMSE {e:e}");
    if e > 1e-5 {
        failures.push(format!(
            "{name} {rows}x{cols} tokens {tokens} mode {y_mode}: NMSE {e:e}"
        ));
    }
    let last = n - 1;
    let per = x_stride as usize / 2;
    let alone = run(1, &words[last * per..(last + 1) * per], &y0[last * ys..]);
    if bits(&alone[..r]) != bits(&got[last * ys..last * ys + r]) {
        failures.push(format!(
            "{name} {rows}x{cols}: token {last} alone differs from its batch row"
        ));
    }
}

/// `len` random activations (scale 2) rounded to f16, and the same packed as f16 pairs (what
/// `ACT_F16` writes for the register-built kernels).
fn f16_activations(rng: &mut Rng, len: usize) -> (Vec<f32>, Vec<u32>) {
    let x: Vec<f32> = rng
        .vec(len, 2.0)
        .iter()
        .map(|&v| round_to(WeightDtype::F16, v))
        .collect();
    let words = x
        .chunks(2)
        .map(|p| {
            u32::from(half::f16::from_f32(p[0]).to_bits())
                | u32::from(half::f16::from_f32(p[1]).to_bits()) << 16
        })
        .collect();
    (x, words)
}

/// A device that runs the register-built matrix-unit kernels (matrix units and the element
/// layout `cmd_layout_self_test` checks); otherwise None, after asserting that the device
/// refuses `kernels` (no matrix units) or saying that its layout differs.
fn register_built_device(kernels: &[&sluice::KernelDesc]) -> Option<Device> {
    let Some(d) = coopmat_device() else {
        for k in kernels {
            assert!(d_refuses(k), "{} not refused without matrix units", k.name);
        }
        return None;
    };
    if !cmd_layout_self_test(&d).unwrap() {
        eprintln!("this device's matrix-unit layout is not the one the kernel assumes");
        return None;
    }
    Some(d)
}

/// Whether a device without matrix units refuses `kernel` by name.
fn d_refuses(kernel: &sluice::KernelDesc) -> bool {
    let d = Device::new(sluice::Options::default()).expect("a Vulkan device");
    matches!(d.pipeline(kernel), Err(sluice::Error::MissingFeature { missing, .. }) if missing.contains(kernel.name))
}
