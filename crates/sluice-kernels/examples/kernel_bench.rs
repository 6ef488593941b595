//! GPU time of the LLM kernels at real model shapes (Qwen3-0.6B / 4B), from timestamps
//! around each dispatch. Weights rotate over enough copies (>= 256 MiB) that the L2 cache
//! cannot serve them. Prints one line per case: median µs and achieved GB/s.
//!
//! `cargo run --release -p sluice-kernels --example kernel_bench [reps] [quant]` (reps:
//! dispatches timed per case, default 50, at least 2: the first one's time is left out)
//!
//! With `quant` as the second argument only the block-format matvecs run (Q8_0 / Q4_0 /
//! Q4_K / Q6_K at the Qwen3-4B / 0.6B decode shapes, plain and fused gate/up+norm, several
//! threads-per-row overrides; each format on its f32 decoders and, where the device has
//! integer dot products, on its `_dp` variants), with GB/s counting the GPU-layout weight
//! bytes. A third argument keeps only the formats it names (`quant q4_k,q6_k`).
//!
//! With `prefetch`: decode matvecs with their weights cold (rotating copies), hot (one
//! copy, L2-resident where it fits) and cold with a `prefetch` dispatch of the next
//! copy's weights beside each matvec (no barrier between them).
//!
//! With `batch`: the batched-decode matvecs (f16) at 1 / 8 / 32 / 64 tokens — act_f16 and
//! matvec_batch_cm (matrix units, where the device has them) and matvec_batch — each alone.
//!
//! With `cmt`: the staged batched matvecs (operands staged through shared memory, K split
//! over workgroups for matrices of few rows; matvec_batch_cmt and its row-owning twin
//! matvec_batch_cmr; for Q4_K and Q6_K also matvec_batch_cmd_<format>, the weights'
//! operands built in registers; for f16 the register-built forms of 32 and 64 tokens (cmd,
//! cmd64) and from 64 tokens the prefill chunks' tiled matmul matmul_tile_f16 (tile)) against
//! matvec_batch_cm, in a chain, each checked against CPU dot products. A third argument
//! keeps only the formats it names (`cmt q4_k,f16`), a fourth only the token counts it
//! names (`cmt q4_k 32`; default 1, 8, 32, 64), a fifth the K-split targets to sweep
//! (`cmt q4_k 32 264,396`: workgroups the split aims for; `-` or none: each shape's own), a
//! sixth `hot` runs one copy of the weights (L2-resident where they fit).
//!
//! With `occ`: how many workgroups of 128 invocations with 0-48 KB of shared memory and
//! few registers run at once (`occupancy_probe_s*`, 20 per multiprocessor dispatched).
//!
//! With `attn`: the fused decode attention (`attention_rope`, `attention_rope_q8`) at the
//! Qwen3-0.6B / 4B head shapes and contexts of 16 to 4096 positions, in a chain of
//! dispatches (a barrier between them, as in a decode step) over rotating KV caches
//! (>= 256 MiB, so their rows come from memory as after a token's weights), and each also
//! right after a kernel that reads 1 MiB, 256 MiB or 4 GiB (timed alone: what the
//! instruction caches, L2 and the address-translation caches losing their contents cost
//! it); the Q4_K integer-dot decode matvec at two 4B shapes the same way.
//!
//! With `battn` (optionally `hot`: one copy of the caches, L2-resident where they fit): the
//! batched paged attention kernels (`batch_attention`, `batch_attention_gqa`,
//! `batch_attention_gqa_hd128`) at the Qwen3-0.6B / 4B head shapes, 8 to 64 rows at 144 to
//! 4096 positions, in a chain over rotating caches, each output against the first kernel's,
//! and each kernel's `_rope` form (batch_rope folded in; timing only).
//!
//! With `pair`: what running among other kernels costs a dispatch (the GPU's instruction
//! cache; decision 0019). The 4B's 32-row step kernels (the register-built Q4_K o and
//! gate/up, the f16 o, the Q6_K down, act_f16, the head_dim-128 attention plain and with
//! batch_rope folded in, the 0.6B's shapes L2-resident and not, `add`) are timed in cycles
//! (`cycle: name µs | ...`: each kernel's median in a repeated sequence, a barrier and a
//! timestamp after every dispatch) and each after each other one; the decode step's five
//! kernel kinds a layer cycle slower than any two of them alternating.
//!
//! With `i8mm`: the batched matvec on int8 matrix units (`matvec_batch_i8mm`, Q4_K) against
//! the integer-dot one (`matvec_batch_dp`) and the staged f16 matrix-unit one the model
//! picks (`matvec_batch_cmt_layout`), in a chain at 1 / 8 / 32 / 64 tokens (timing only:
//! tests/int8_matrix.rs checks the results).

use sluice::{Buffer, Device, Options, ResourceClass, TimestampQueries};
use sluice_kernels::*;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn buffer(d: &Device, name: &str, bytes: u64, class: ResourceClass) -> Buffer {
    d.create_buffer(name, bytes.max(16), class).unwrap()
}

/// A buffer holding `data`.
fn filled<T: bytemuck::Pod>(d: &Device, name: &str, data: &[T], class: ResourceClass) -> Buffer {
    let b = buffer(d, name, std::mem::size_of_val(data) as u64, class);
    b.write(0, data).unwrap();
    b
}

/// Key and value caches of `bytes` each, every entry 1.0 (f16).
fn ones_caches(d: &Device, bytes: u64) -> (Buffer, Buffer) {
    let ones = vec![0x3c003c00u32; (bytes / 4) as usize];
    let kc = filled(d, "kc", &ones, ResourceClass::AppendOnlyKv);
    let vc = filled(d, "vc", &ones, ResourceClass::AppendOnlyKv);
    (kc, vc)
}

/// The decode params of a step at `depth` positions (the new token at depth - 1).
fn depth_params(d: &Device, depth: u32) -> Buffer {
    filled(
        d,
        "params",
        &[0u32, depth - 1, depth, 0],
        ResourceClass::Generic,
    )
}

/// Runs the dispatches of `record` untimed until 100 ms have passed: the GPU's clocks drop
/// while the host uploads weights (the H100 idles at 345 MHz), and a measurement right after
/// an upload would run at a fraction of the speed.
fn warm_up(d: &Device, reps: u32, record: &mut impl FnMut(&mut sluice::Encoder, u32)) {
    let t = std::time::Instant::now();
    while t.elapsed().as_secs_f64() < 0.1 {
        let mut enc = d.encoder().unwrap();
        for i in 0..reps {
            record(&mut enc, i);
        }
        enc.submit().unwrap().wait().unwrap();
    }
}

/// Times `reps` dispatches recorded by `record(enc, i)` after a warm-up; returns
/// per-dispatch µs (median).
fn time(d: &Device, reps: u32, mut record: impl FnMut(&mut sluice::Encoder, u32)) -> f64 {
    warm_up(d, reps, &mut record);
    let q = TimestampQueries::new(d, reps + 1).unwrap();
    let mut enc = d.encoder().unwrap();
    enc.write_timestamp(&q, 0).unwrap();
    for i in 0..reps {
        record(&mut enc, i);
        enc.write_timestamp(&q, i + 1).unwrap();
    }
    enc.submit().unwrap().wait().unwrap();
    let ts = q.read_ns().unwrap();
    median(
        ts.windows(2)
            .skip(1)
            .map(|w| (w[1] - w[0]) / 1000.0)
            .collect(),
    )
}

fn main() {
    let reps: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50)
        .max(2); // `time` leaves out the first dispatch's timing
    let d = Device::new(Options::default()).unwrap();
    let info = d.info();
    println!("device: {} (subgroup {})", info.name, info.subgroup_size);
    if std::env::args().nth(2).as_deref() == Some("quant") {
        quant_bench(&d, reps, std::env::args().nth(3));
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("prefetch") {
        prefetch_bench(&d, reps);
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("batch") {
        batch_bench(&d, reps);
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("occ") {
        occ_bench(&d);
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("i8mm") {
        i8mm_bench(&d, reps);
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("attn") {
        attn_bench(&d, reps);
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("battn") {
        battn_bench(&d, reps);
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("pair") {
        pair_bench(&d, reps);
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("cmt") {
        let tokens = std::env::args().nth(4).map_or(vec![1, 8, 32, 64], |l| {
            l.split(',')
                .map(|t| t.parse().expect("token counts: comma-separated integers"))
                .collect()
        });
        let targets: Vec<Option<u32>> =
            std::env::args()
                .nth(5)
                .filter(|l| l != "-")
                .map_or(vec![None], |l| {
                    l.split(',')
                        .map(|t| Some(t.parse().expect("split targets: comma-separated integers")))
                        .collect()
                });
        let hot = std::env::args().nth(6).as_deref() == Some("hot");
        cmt_bench(&d, reps, std::env::args().nth(3), &tokens, &targets, hot);
        return;
    }
    let shapes: &[(&str, u32, u32)] = &[
        ("0.6b q", 2048, 1024),
        ("0.6b kv", 1024, 1024),
        ("0.6b o", 1024, 2048),
        ("0.6b down", 1024, 3072),
        ("0.6b lm_head", 151936, 1024),
        ("4b q", 4096, 2560),
        ("4b o", 2560, 4096),
        ("4b down", 2560, 9728),
        ("4b gate", 9728, 2560),
        ("8k x 8k", 8192, 8192),
    ];
    let budget = 256u64 << 20;
    for dtype in [WeightDtype::F16, WeightDtype::Bf16, WeightDtype::F32] {
        let k = d.pipeline(matvec(dtype)).unwrap();
        for &(name, rows, cols) in shapes {
            if dtype != WeightDtype::F16 && !name.starts_with("4b") {
                continue;
            }
            let wbytes = rows as u64 * stride8(cols) as u64 * 8 * dtype.bytes() as u64;
            let copies = budget.div_ceil(wbytes).clamp(2, 64);
            let ws: Vec<Buffer> = (0..copies)
                .map(|_| buffer(&d, "w", wbytes, ResourceClass::ReadOnlyWeight))
                .collect();
            let x = buffer(&d, "x", cols as u64 * 4, ResourceClass::TokenScratch);
            x.write(0, &vec![0.5f32; cols as usize]).unwrap();
            let y = buffer(&d, "y", rows as u64 * 4, ResourceClass::TokenScratch);
            let push = MatvecPush {
                rows,
                cols,
                stride8: stride8(cols),
                accumulate: 0,
                eps: 0.0,
                threads_per_row: 0,
                x_stride4: 0,
                y_stride: 0,
                ..Default::default()
            };
            let us = time(&d, reps, |enc, i| {
                let w = &ws[(i as u64 % copies) as usize];
                enc.dispatch(
                    &k,
                    matvec_groups(rows, cols),
                    &[w.slice(..), x.slice(..), y.slice(..)],
                    &push,
                )
                .unwrap();
            });
            let bytes = wbytes + cols as u64 * 4 + rows as u64 * 4;
            println!(
                "matvec_{:<4} {name:<13} {rows:>6}x{cols:<5} {us:>8.2} us {:>7.0} GB/s",
                dtype.name(),
                bytes as f64 / us / 1e3
            );
        }
    }
    // Fused gate/up.
    let k = d.pipeline(matvec_silu(WeightDtype::F16)).unwrap();
    for &(name, rows, cols) in &[
        ("0.6b gate_up", 3072u32, 1024u32),
        ("4b gate_up", 9728, 2560),
    ] {
        let wbytes = rows as u64 * stride8(cols) as u64 * 16;
        let copies = budget.div_ceil(2 * wbytes).clamp(2, 64);
        let ws: Vec<Buffer> = (0..2 * copies)
            .map(|_| buffer(&d, "w", wbytes, ResourceClass::ReadOnlyWeight))
            .collect();
        let x = buffer(&d, "x", cols as u64 * 4, ResourceClass::TokenScratch);
        x.write(0, &vec![0.5f32; cols as usize]).unwrap();
        let y = buffer(&d, "y", rows as u64 * 4, ResourceClass::TokenScratch);
        let push = MatvecPush {
            rows,
            cols,
            stride8: stride8(cols),
            accumulate: 0,
            eps: 0.0,
            threads_per_row: 0,
            x_stride4: 0,
            y_stride: 0,
            ..Default::default()
        };
        let us = time(&d, reps, |enc, i| {
            let j = 2 * (i as u64 % copies) as usize;
            let s = [
                ws[j].slice(..),
                ws[j + 1].slice(..),
                x.slice(..),
                y.slice(..),
            ];
            enc.dispatch(&k, matvec_groups(rows, cols), &s, &push)
                .unwrap();
        });
        println!(
            "matvec_silu_f16 {name:<13} {rows:>6}x{cols:<5} {us:>8.2} us {:>7.0} GB/s",
            (2 * wbytes) as f64 / us / 1e3
        );
    }
    // Attention at depth (0.6B: 16/8 heads, 4B: 32/8 heads; head_dim 128).
    let split = d.pipeline(&ATTENTION_SPLIT).unwrap();
    let combine = d.pipeline(&ATTENTION_COMBINE).unwrap();
    for (name, heads, kv_heads) in [("0.6b", 16u32, 8u32), ("4b", 32, 8)] {
        let (hd, capacity, chunk) = (128u32, 4352u32, 256u32);
        let splits = attention_splits(capacity, chunk, heads);
        let cache = (kv_heads * capacity * hd * 2) as u64;
        let (kc, vc) = ones_caches(&d, cache);
        let q = buffer(
            &d,
            "q",
            (heads * hd * 4) as u64,
            ResourceClass::TokenScratch,
        );
        q.write(0, &vec![0.01f32; (heads * hd) as usize]).unwrap();
        let part = buffer(
            &d,
            "part",
            (heads * splits * (hd + 2) * 4) as u64,
            ResourceClass::TokenScratch,
        );
        let out = buffer(
            &d,
            "out",
            (heads * hd * 4) as u64,
            ResourceClass::TokenScratch,
        );
        let counters = filled(
            &d,
            "counters",
            &vec![0u32; heads as usize],
            ResourceClass::TokenScratch,
        );
        let p = AttnPush {
            heads,
            kv_heads,
            head_dim: hd,
            capacity,
            chunk,
            splits,
            scale: 0.088,
            q_stride: 0,
        };
        for depth in [1u32, 512, 4096] {
            let params = depth_params(&d, depth);
            let us_split = time(&d, reps, |enc, _| {
                let s = [
                    params.slice(..),
                    q.slice(..),
                    kc.slice(..),
                    vc.slice(..),
                    part.slice(..),
                    counters.slice(..),
                    out.slice(..),
                ];
                enc.dispatch(&split, [splits, heads, 1], &s, &p).unwrap();
            });
            let us_comb = time(&d, reps, |enc, _| {
                enc.dispatch(
                    &combine,
                    [heads, 1, 1],
                    &[params.slice(..), part.slice(..), out.slice(..)],
                    &p,
                )
                .unwrap();
            });
            let kv_bytes = 2 * (kv_heads * depth * hd * 2) as u64;
            println!(
                "attention {name:<5} depth {depth:>5}: split+combine in one dispatch {us_split:>7.2} us ({:>5.0} GB/s of KV), separate combine {us_comb:>6.2} us",
                kv_bytes as f64 / us_split / 1e3
            );
        }
    }
    // Small ops.
    let n = 151936u32;
    let logits = buffer(&d, "logits", n as u64 * 4, ResourceClass::TokenScratch);
    logits
        .write(0, &(0..n).map(|i| (i % 1000) as f32).collect::<Vec<_>>())
        .unwrap();
    let result = buffer(&d, "result", 8, ResourceClass::PersistentOutput);
    let params = buffer(&d, "params", 16, ResourceClass::Generic);
    let am = d.pipeline(&ARGMAX).unwrap();
    for groups in [1, argmax_groups(n)] {
        let words = argmax_scratch_words(groups);
        let scratch = buffer(&d, "scratch", words as u64 * 4, ResourceClass::TokenScratch);
        scratch.write(0, &vec![0u32; words as usize]).unwrap();
        let us = time(&d, reps, |enc, _| {
            enc.dispatch(
                &am,
                [groups, 1, 1],
                &[
                    logits.slice(..),
                    result.slice(..),
                    params.slice(..),
                    scratch.slice(..),
                ],
                &ArgmaxPush { n },
            )
            .unwrap();
        });
        println!("argmax n {n} in {groups} workgroups: {us:.2} us");
    }
    let rms = d.pipeline(&RMSNORM).unwrap();
    let xs = buffer(&d, "x", 2560 * 4, ResourceClass::TokenScratch);
    let wn = buffer(&d, "w", 2560 * 4, ResourceClass::ReadOnlyWeight);
    let ys = buffer(&d, "y", 2560 * 4, ResourceClass::TokenScratch);
    let us = time(&d, reps, |enc, _| {
        let push = RmsNormPush {
            n: 2560,
            rows: 1,
            eps: 1e-6,
            stride: 0,
        };
        enc.dispatch(
            &rms,
            [1, 1, 1],
            &[xs.slice(..), wn.slice(..), ys.slice(..)],
            &push,
        )
        .unwrap();
    });
    println!("rmsnorm n 2560: {us:.2} us");
    let rope = d.pipeline(&QK_NORM_ROPE).unwrap();
    let (heads, kvh, hd, cap) = (32u32, 8u32, 128u32, 4352u32);
    let qb = buffer(
        &d,
        "q",
        (heads * hd * 4) as u64,
        ResourceClass::TokenScratch,
    );
    let kb = buffer(&d, "k", (kvh * hd * 4) as u64, ResourceClass::TokenScratch);
    let vb = buffer(&d, "v", (kvh * hd * 4) as u64, ResourceClass::TokenScratch);
    let nb = buffer(&d, "n", (hd * 4) as u64, ResourceClass::ReadOnlyWeight);
    let kc = buffer(
        &d,
        "kc",
        (kvh * cap * hd * 2) as u64,
        ResourceClass::AppendOnlyKv,
    );
    let vc = buffer(
        &d,
        "vc",
        (kvh * cap * hd * 2) as u64,
        ResourceClass::AppendOnlyKv,
    );
    params.write(0, &[0u32, 100, 101, 0]).unwrap();
    let p = QkRopePush {
        heads,
        kv_heads: kvh,
        head_dim: hd,
        capacity: cap,
        flags: ROPE_NORM,
        eps: 1e-6,
        theta: 1e6,
        token_stride: 0,
    };
    let us = time(&d, reps, |enc, _| {
        let s = [
            params.slice(..),
            qb.slice(..),
            kb.slice(..),
            vb.slice(..),
            nb.slice(..),
            nb.slice(..),
            kc.slice(..),
            vc.slice(..),
            nb.slice(..),
            nb.slice(..),
        ];
        enc.dispatch(&rope, [heads + kvh, 1, 1], &s, &p).unwrap();
    });
    println!("qk_norm_rope 32/8 x 128: {us:.2} us");
}

/// Block-format matvecs at the decode shapes: `matvec` for every shape, `matvec_silu_norm`
/// (gate/up) for the MLP shapes; tpr = None (the default rule) and overrides.
fn quant_bench(d: &Device, reps: u32, only: Option<String>) {
    let shapes: &[(&str, u32, u32)] = &[
        ("4b qkv", 6144, 2560),
        ("4b v", 1024, 2560),
        ("4b o", 2560, 4096),
        ("4b gate", 9728, 2560),
        ("4b down", 2560, 9728),
        ("4b lm_head", 151936, 2560),
        ("0.6b qkv", 4096, 1024),
        ("0.6b o", 1024, 2048),
        ("0.6b gate", 3072, 1024),
        ("0.6b down", 1024, 3072),
    ];
    let budget = 256u64 << 20;
    let dts = [
        WeightDtype::Q8_0,
        WeightDtype::Q4_0,
        WeightDtype::Q4K,
        WeightDtype::Q6K,
    ];
    // Each format on its f32 decoders, then (where the device has integer dot products)
    // on the `_dp` variants.
    let wanted = |dt: WeightDtype| {
        only.as_ref()
            .is_none_or(|o| o.split(',').any(|n| n == dt.name()))
    };
    let runs = dts.iter().filter(|&&dt| wanted(dt)).flat_map(|&dt| {
        [false, true]
            .into_iter()
            .filter(move |&dp| !dp || (has_int_dot(dt) && d.info().int_dot))
            .map(move |dp| (dt, dp))
    });
    for (dt, dp) in runs {
        let plain = d
            .pipeline(matvec_kernel("matvec", dt, dp).unwrap())
            .unwrap();
        let fused = d
            .pipeline(matvec_kernel("matvec_silu_norm", dt, dp).unwrap())
            .unwrap();
        for &(name, rows, cols) in shapes {
            let wbytes = gpu_matrix_bytes(dt, rows as u64, cols as u64).unwrap();
            let is_gate = name.ends_with("gate");
            let mats = if is_gate { 2 } else { 1 };
            let copies = budget
                .div_ceil(mats * wbytes)
                .clamp(if budget == 0 { 1 } else { 2 }, 64);
            let ws: Vec<Buffer> = (0..mats * copies)
                .map(|_| buffer(d, "w", wbytes, ResourceClass::ReadOnlyWeight))
                .collect();
            let x = buffer(d, "x", cols as u64 * 4, ResourceClass::TokenScratch);
            x.write(0, &vec![0.5f32; cols as usize]).unwrap();
            let nw = buffer(d, "nw", cols as u64 * 4, ResourceClass::ReadOnlyWeight);
            nw.write(0, &vec![1.0f32; cols as usize]).unwrap();
            let y = buffer(d, "y", rows as u64 * 4, ResourceClass::TokenScratch);
            let (pt, pr) = quant_matvec_plan(dt, rows, cols);
            let mut line = format!(
                "{:<8} {name:<11} {rows:>6}x{cols:<5} plan {pt:>3}x{pr}",
                format!("{}{}", dt.name(), if dp { "_dp" } else { "" })
            );
            for tpr in [None, Some(8), Some(16), Some(32), Some(64), Some(128)] {
                let push = matvec_push(dt, rows, cols, false, 1e-6, tpr);
                let groups = matvec_groups_dt(dt, rows, cols, tpr);
                let us = time(d, reps, |enc, i| {
                    let j = (mats * (i as u64 % copies)) as usize;
                    if is_gate {
                        let s = [
                            ws[j].slice(..),
                            ws[j + 1].slice(..),
                            x.slice(..),
                            nw.slice(..),
                            y.slice(..),
                        ];
                        enc.dispatch(&fused, groups, &s, &push).unwrap();
                    } else {
                        let s = [ws[j].slice(..), x.slice(..), y.slice(..)];
                        enc.dispatch(&plain, groups, &s, &push).unwrap();
                    }
                });
                let gbs = (mats * wbytes) as f64 / us / 1e3;
                let t = tpr.map_or("def".to_string(), |t| t.to_string());
                line += &format!(" | tpr {t:>3} {us:>7.2} us {gbs:>5.0} GB/s");
            }
            println!("{line}");
        }
    }
}

/// The batched-decode matvec kernels at decode shapes and batch sizes, each dispatch alone.
fn batch_bench(d: &Device, reps: u32) {
    let shapes: &[(&str, u32, u32)] = &[
        ("0.6b qkv", 4096, 1024),
        ("0.6b o", 1024, 2048),
        ("0.6b down", 1024, 3072),
        ("4b down", 2560, 9728),
        ("4b qkv", 6144, 2560),
    ];
    let cm = coopmat_self_test(d).unwrap();
    let budget = 256u64 << 20;
    for &(name, rows, cols) in shapes {
        let wbytes = rows as u64 * cols as u64 * 2;
        let copies = budget.div_ceil(wbytes).clamp(2, 64);
        let ws: Vec<Buffer> = (0..copies)
            .map(|_| buffer(d, "w", wbytes, ResourceClass::ReadOnlyWeight))
            .collect();
        // The matrix-unit kernel's weights: f16 (`ws`) and two block formats (decoded into
        // shared memory), each as copies that fill the budget.
        let cm_sets: Vec<(WeightDtype, u64, Vec<Buffer>)> = if cm {
            [WeightDtype::Q4K, WeightDtype::Q6K]
                .into_iter()
                .map(|dt| {
                    let bytes = gpu_matrix_bytes(dt, rows as u64, cols as u64).unwrap();
                    let n = budget.div_ceil(bytes).clamp(2, 64);
                    let bufs = (0..n)
                        .map(|_| buffer(d, "wq", bytes, ResourceClass::ReadOnlyWeight))
                        .collect();
                    (dt, bytes, bufs)
                })
                .collect()
        } else {
            Vec::new()
        };
        let cm_runs: Vec<(WeightDtype, u64, &[Buffer])> =
            std::iter::once((WeightDtype::F16, wbytes, &ws[..]))
                .filter(|_| cm)
                .chain(cm_sets.iter().map(|(dt, b, v)| (*dt, *b, &v[..])))
                .collect();
        for tokens in [1u32, 8, 32, 64] {
            let x = buffer(
                d,
                "x",
                (tokens * cols) as u64 * 4,
                ResourceClass::TokenScratch,
            );
            x.write(0, &vec![0.5f32; (tokens * cols) as usize]).unwrap();
            let nw = buffer(d, "norm", cols as u64 * 4, ResourceClass::ReadOnlyWeight);
            nw.write(0, &vec![1.0f32; cols as usize]).unwrap();
            let padded = tokens.next_multiple_of(16);
            let xh = buffer(
                d,
                "xh",
                (padded * cols) as u64 * 2,
                ResourceClass::TokenScratch,
            );
            let y = buffer(
                d,
                "y",
                (tokens * rows) as u64 * 4,
                ResourceClass::TokenScratch,
            );
            let act = d.pipeline(&ACT_F16).unwrap();
            let ap = ActF16Push {
                cols,
                tokens,
                x_stride: cols,
                h_words: cols / 2,
                norm: 1,
                eps: 1e-6,
            };
            let act_us = time(d, reps, |enc, _| {
                enc.dispatch(
                    &act,
                    [padded, 1, 1],
                    &[x.slice(..), nw.slice(..), xh.slice(..)],
                    &ap,
                )
                .unwrap();
            });
            let mut line =
                format!("{name:<10} {rows:>5}x{cols:<5} t{tokens:<3} act_f16 {act_us:>7.2} us");
            // The matrix-unit batched matvec: f16 weights (`cm`), block formats (`cmq`).
            for &(dt, bytes, bufs) in &cm_runs {
                let k = d
                    .pipeline(matvec_batch_cm(dt, false, rows).unwrap())
                    .unwrap();
                let (push, groups) = MatvecBatchCmPush::new(dt, rows, cols, tokens);
                let us = time(d, reps, |enc, i| {
                    let w = &bufs[i as usize % bufs.len()];
                    enc.dispatch(&k, groups, &[w.slice(..), xh.slice(..), y.slice(..)], &push)
                        .unwrap();
                });
                let label = if dt == WeightDtype::F16 {
                    "cm".to_string()
                } else {
                    format!("cmq {}", dt.name())
                };
                line += &format!(
                    " | {label} {us:>7.2} us {:>5.0} GB/s",
                    bytes as f64 / us / 1e3
                );
            }
            if cm {
                let k = d
                    .pipeline(matmul(WeightDtype::F16, MatmulVariant::Plain, true))
                    .unwrap();
                let push = MatmulPush::new(rows, cols, tokens);
                let us = time(d, reps, |enc, i| {
                    let w = &ws[(i as u64 % copies) as usize];
                    enc.dispatch(
                        &k,
                        matmul_groups(rows, tokens, true),
                        &[w.slice(..), x.slice(..), y.slice(..)],
                        &push,
                    )
                    .unwrap();
                });
                line += &format!(
                    " | matmul_cm {us:>7.2} us {:>5.0} GB/s",
                    wbytes as f64 / us / 1e3
                );
            }
            let k = d
                .pipeline(matvec_batch(WeightDtype::F16, false, false).unwrap())
                .unwrap();
            let lay = matvec_batch_layout(rows, tokens);
            let push = MatvecBatchPush {
                rows,
                cols,
                stride8: stride8(cols),
                accumulate: 0,
                eps: 0.0,
                tokens,
                x_stride4: cols / 4,
                y_stride: rows,
                tokens_per_wg: lay.tokens_per_wg,
                row_groups_y: lay.row_groups_y,
            };
            let us = time(d, reps, |enc, i| {
                let w = &ws[(i as u64 % copies) as usize];
                enc.dispatch(
                    &k,
                    lay.groups,
                    &[w.slice(..), x.slice(..), y.slice(..)],
                    &push,
                )
                .unwrap();
            });
            line += &format!(
                " | matvec_batch {us:>7.2} us {:>5.0} GB/s",
                wbytes as f64 / us / 1e3
            );
            println!("{line}");
        }
    }
}

/// Decode matvecs cold, hot and with the next weights prefetched beside each dispatch.
fn prefetch_bench(d: &Device, reps: u32) {
    let shapes: &[(&str, u32, u32)] = &[
        ("0.6b qkv", 4096, 1024),
        ("0.6b o", 1024, 2048),
        ("0.6b gate", 3072, 1024),
        ("0.6b down", 1024, 3072),
        ("4b qkv", 6144, 2560),
        ("4b o", 2560, 4096),
        ("4b gate", 9728, 2560),
        ("4b down", 2560, 9728),
    ];
    let pf = d.pipeline(&PREFETCH).unwrap();
    let sink = buffer(d, "sink", 256, ResourceClass::TokenScratch);
    let budget = 256u64 << 20;
    for dt in [WeightDtype::F16, WeightDtype::Q4K, WeightDtype::Q8_0] {
        let int_dot = d.info().int_dot;
        let k = d
            .pipeline(matvec_kernel("matvec", dt, int_dot).unwrap())
            .unwrap();
        for &(name, rows, cols) in shapes {
            let ColdMatvec {
                wbytes,
                ws,
                x,
                y,
                push,
                groups,
            } = cold_matvec(d, dt, rows, cols, budget);
            let copies = ws.len() as u64;
            let mut line = format!(
                "{:<5} {name:<10} {:>6.2} MB",
                dt.name(),
                wbytes as f64 / 1e6
            );
            // 0 = hot (one copy), 1 = cold, then cold with prefetch grids of N workgroups.
            for mode in [0u32, 1, 66, 132, 264, 528] {
                let us = time(d, reps, |enc, i| {
                    let j = if mode == 0 {
                        0
                    } else {
                        (i as u64 % copies) as usize
                    };
                    if mode > 1 {
                        let next = &ws[(j + 1) % copies as usize];
                        let pp = PrefetchPush {
                            sectors: (wbytes / 32) as u32,
                            threads: mode * 256,
                            magic: 0x9E37_79B9,
                        };
                        let s = [next.slice(..), x.slice(..), sink.slice(..)];
                        enc.dispatch(&pf, [mode, 1, 1], &s, &pp).unwrap();
                    }
                    let s = [ws[j].slice(..), x.slice(..), y.slice(..)];
                    enc.dispatch(&k, groups, &s, &push).unwrap();
                });
                let what = match mode {
                    0 => "hot".to_string(),
                    1 => "cold".to_string(),
                    n => format!("pf{n}"),
                };
                line += &format!(" | {what} {us:>6.2}");
            }
            println!("{line}");
        }
    }
}

/// A decode matvec's buffers: its weights in enough copies to fill `budget` bytes (2 to
/// 64), x (0.5 everywhere) and y, with its push constants and grid.
struct ColdMatvec {
    wbytes: u64,
    ws: Vec<Buffer>,
    x: Buffer,
    y: Buffer,
    push: MatvecPush,
    groups: [u32; 3],
}

fn cold_matvec(d: &Device, dt: WeightDtype, rows: u32, cols: u32, budget: u64) -> ColdMatvec {
    let wbytes = if dt.is_quantized() {
        gpu_matrix_bytes(dt, rows as u64, cols as u64).unwrap()
    } else {
        rows as u64 * stride8(cols) as u64 * 16
    };
    let copies = budget.div_ceil(wbytes).clamp(2, 64);
    let x = buffer(d, "x", cols as u64 * 4, ResourceClass::TokenScratch);
    x.write(0, &vec![0.5f32; cols as usize]).unwrap();
    ColdMatvec {
        wbytes,
        ws: (0..copies)
            .map(|_| buffer(d, "w", wbytes, ResourceClass::ReadOnlyWeight))
            .collect(),
        x,
        y: buffer(d, "y", rows as u64 * 4, ResourceClass::TokenScratch),
        push: matvec_push(dt, rows, cols, false, 0.0, None),
        groups: matvec_groups_dt(dt, rows, cols, None),
    }
}

/// Median µs of the dispatches `record(enc, i)` makes, each after those of
/// `before(enc, i)` with a barrier between every two dispatches (only `record`'s timed).
fn time_after(
    d: &Device,
    reps: u32,
    mut before: impl FnMut(&mut sluice::Encoder, u32),
    mut record: impl FnMut(&mut sluice::Encoder, u32),
) -> f64 {
    let mut both = |enc: &mut sluice::Encoder, i: u32| {
        before(enc, i);
        record(enc, i);
    };
    warm_up(d, reps, &mut both);
    let q = TimestampQueries::new(d, 2 * reps).unwrap();
    let mut enc = d.encoder().unwrap();
    enc.set_barrier_mode(sluice::BarrierMode::Serial);
    for i in 0..reps {
        before(&mut enc, i);
        enc.write_timestamp(&q, 2 * i).unwrap();
        record(&mut enc, i);
        enc.write_timestamp(&q, 2 * i + 1).unwrap();
    }
    enc.submit().unwrap().wait().unwrap();
    let ts = q.read_ns().unwrap();
    median(ts.chunks(2).map(|w| (w[1] - w[0]) / 1000.0).collect())
}

/// Per-dispatch µs of `reps` dispatches in a chain (one timestamp pair around them all).
fn time_chain(d: &Device, reps: u32, mut record: impl FnMut(&mut sluice::Encoder, u32)) -> f64 {
    warm_up(d, reps, &mut record);
    let mut best = f64::MAX;
    for _ in 0..3 {
        let q = TimestampQueries::new(d, 2).unwrap();
        let mut enc = d.encoder().unwrap();
        enc.write_timestamp(&q, 0).unwrap();
        for i in 0..reps {
            record(&mut enc, i);
        }
        enc.write_timestamp(&q, 1).unwrap();
        enc.submit().unwrap().wait().unwrap();
        let ts = q.read_ns().unwrap();
        best = best.min((ts[1] - ts[0]) / 1000.0 / reps as f64);
    }
    best
}

/// Deterministic pseudo-random values in [-scale / 2, scale / 2) from `seed` (an LCG): the
/// benches' weights and activations.
fn uniform(mut seed: u32) -> impl FnMut(f32) -> f32 {
    move |scale| {
        seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
        ((seed >> 9) as f32 / 8388608.0 - 0.5) * scale
    }
}

/// The partial sums and (zeroed) tickets a staged layout's K split needs.
fn staged_scratch(d: &Device, lay: &MatvecBatchCmtLayout) -> (Buffer, Buffer) {
    let part = buffer(
        d,
        "part",
        lay.part_floats.max(1) * 4,
        ResourceClass::TokenScratch,
    );
    let tick = buffer(d, "tick", lay.tickets * 4, ResourceClass::TokenScratch);
    tick.write(0, &vec![0u32; lay.tickets as usize]).unwrap();
    (part, tick)
}

/// Copies of a weight matrix (`mats` 2: a gate/up pair, the up from the next 256-byte
/// offset of the copy's one buffer, as the model stores a layer's pair), rotated so that
/// about a budget of bytes is touched.
struct Copies {
    bufs: Vec<Buffer>,
    mats: u64,
    /// One matrix's bytes.
    wbytes: u64,
    /// Bytes from a copy's gate to its up.
    stride: u64,
}

impl Copies {
    /// Copies of a `rows`-row matrix made of the `base` packed rows repeated, `mats` to a
    /// copy, enough to touch about `budget` bytes (0: one copy).
    fn new(d: &Device, packed: &[u8], base: usize, rows: u32, mats: u64, budget: u64) -> Self {
        let row_bytes = packed.len() / base;
        let mut full = Vec::with_capacity(row_bytes * rows as usize);
        for r in 0..rows as usize {
            full.extend_from_slice(&packed[(r % base) * row_bytes..][..row_bytes]);
        }
        let wbytes = full.len() as u64;
        let stride = wbytes.next_multiple_of(256);
        let copies = budget
            .div_ceil(mats * wbytes)
            .clamp(if budget == 0 { 1 } else { 2 }, 64);
        let bufs = (0..copies)
            .map(|_| {
                let b = buffer(
                    d,
                    "w",
                    (mats - 1) * stride + wbytes,
                    ResourceClass::ReadOnlyWeight,
                );
                for m in 0..mats {
                    b.write_bytes(m * stride, &full).unwrap();
                }
                b
            })
            .collect();
        Copies {
            bufs,
            mats,
            wbytes,
            stride,
        }
    }

    fn count(&self) -> u64 {
        self.bufs.len() as u64
    }

    /// The matrices of dispatch i's copy as separate bindings (gate, then up).
    fn mats(&self, i: u32) -> Vec<sluice::BufferSlice<'_>> {
        let b = &self.bufs[(i as u64 % self.count()) as usize];
        (0..self.mats)
            .map(|m| b.slice(m * self.stride..m * self.stride + self.wbytes))
            .collect()
    }

    /// Dispatch i's copy as one binding (a pair's gate through its up).
    fn whole(&self, i: u32) -> sluice::BufferSlice<'_> {
        self.bufs[(i as u64 % self.count()) as usize].slice(..)
    }

    /// Where a copy's up starts, in vec4s from its gate (push field `gated` of the
    /// kernels of both forms).
    fn up_at(&self) -> u32 {
        (self.stride / 16) as u32
    }
}

/// The staged batched matvecs (`matvec_batch_cmt[_silu]`, `matvec_batch_cmr[_silu]`) against
/// the matrix-unit one they replaced (`matvec_batch_cm[_silu]`, block formats `matvec_batch_cmq[_silu]`) at decode
/// shapes: µs in a chain of `reps` dispatches over rotating weight copies, GB/s, and each
/// one's largest error relative to the largest |y| against a CPU dot product (weights
/// decoded and rounded to f16) at four (token, row) points. The gate shapes run gated
/// (gate and up: two matrices). `only`: comma-separated dtype names (default all);
/// `token_counts`: the token counts timed (the fourth argument, e.g. `32` or `8,64`;
/// default 1, 8, 32, 64).
fn cmt_bench(
    d: &Device,
    reps: u32,
    only: Option<String>,
    token_counts: &[u32],
    targets: &[Option<u32>],
    hot: bool,
) {
    let shapes: &[(&str, u32, u32)] = &[
        ("4b qkv", 6144, 2560),
        ("4b v", 1024, 2560),
        ("4b o", 2560, 4096),
        ("4b gate", 9728, 2560),
        ("4b down", 2560, 9728),
        ("0.6b qkv", 4096, 1024),
        ("0.6b o", 1024, 2048),
        ("0.6b gate", 3072, 1024),
        ("0.6b down", 1024, 3072),
        ("0.6b lm_head", 151936, 1024),
    ];
    if !coopmat_self_test(d).unwrap() {
        println!("no cooperative matrices");
        return;
    }
    let dts = [
        WeightDtype::Q4K,
        WeightDtype::Q6K,
        WeightDtype::Q8_0,
        WeightDtype::Q4_0,
        WeightDtype::Q4_1,
        WeightDtype::Q5_0,
        WeightDtype::Q5_1,
        WeightDtype::Q5K,
        WeightDtype::F16,
    ];
    let wanted = |dt: &WeightDtype| {
        only.as_ref()
            .is_none_or(|o| o.split(',').any(|n| n == dt.name()))
    };
    // Hot: one copy of the weights (L2-resident where they fit).
    let budget = if hot { 0 } else { 512u64 << 20 };
    let mut rnd = uniform(11);
    for dt in dts.into_iter().filter(wanted) {
        for &(name, rows, cols) in shapes {
            let gated = name.ends_with("gate");
            // 64 distinct rows repeated (every row of the GPU layout has the same stride).
            let base = 64usize;
            let src: Vec<f32> = (0..base * cols as usize).map(|_| rnd(0.2)).collect();
            let packed = pack_weights(dt, base, cols as usize, &src);
            let deq = if dt.is_quantized() {
                dequantize(
                    dt,
                    base,
                    cols as usize,
                    &quantize(dt, base, cols as usize, &src),
                )
            } else {
                src.clone()
            };
            let deq: Vec<f32> = deq.iter().map(|&v| round_to(WeightDtype::F16, v)).collect();
            let mats = if gated { 2 } else { 1 };
            let ws = Copies::new(d, &packed, base, rows, mats, budget);
            let wbytes = ws.wbytes;
            for &tokens in token_counts {
                let padded = tokens.next_multiple_of(16);
                let xs: Vec<f32> = (0..(padded * cols) as usize)
                    .map(|i| {
                        if i / (cols as usize) < tokens as usize {
                            round_to(WeightDtype::F16, rnd(2.0))
                        } else {
                            0.0
                        }
                    })
                    .collect();
                let xbits: Vec<u16> = xs
                    .iter()
                    .map(|&v| half::f16::from_f32(v).to_bits())
                    .collect();
                let xh = buffer(
                    d,
                    "xh",
                    (padded * cols) as u64 * 2,
                    ResourceClass::TokenScratch,
                );
                xh.write(0, &xbits).unwrap();
                let n = (tokens * rows) as usize;
                let y = buffer(d, "y", n as u64 * 4, ResourceClass::TokenScratch);
                let dot = |t: usize, r: usize| -> f32 {
                    let w = &deq[(r % base) * cols as usize..][..cols as usize];
                    let x = &xs[t * cols as usize..][..cols as usize];
                    w.iter().zip(x).map(|(a, b)| a * b).sum()
                };
                // Gated: gate and up are the same matrix here, so y = silu(g) * g.
                let want = |t: usize, r: usize| {
                    let g = dot(t, r);
                    if gated {
                        g / (1.0 + (-g).exp()) * g
                    } else {
                        g
                    }
                };
                let last = tokens as usize - 1;
                let points = [
                    (0usize, 0usize),
                    (0, rows as usize - 1),
                    (last, 17),
                    (last, rows as usize / 2 + 5),
                ];
                let err = |got: &[f32]| -> f32 {
                    let scale = points
                        .iter()
                        .map(|&(t, r)| want(t, r).abs())
                        .fold(1e-6, f32::max);
                    points
                        .iter()
                        .map(|&(t, r)| (got[t * rows as usize + r] - want(t, r)).abs() / scale)
                        .fold(0.0, f32::max)
                };
                let mut line = format!(
                    "{:<5} {name:<10} {rows:>5}x{cols:<5} t{tokens:<3}",
                    dt.name()
                );
                // One kernel in a chain over the weight copies, then its error: `extra`
                // bindings after w, [w_b], xh, y (`$both`: a kernel of both forms, a pair
                // as one binding).
                macro_rules! chain {
                    ($label:expr, $k:expr, $groups:expr, $extra:expr, $push:expr, $both:expr) => {{
                        y.write(0, &vec![0f32; n]).unwrap();
                        let us = time_chain(d, reps, |enc, i| {
                            let mut b = if $both { vec![ws.whole(i)] } else { ws.mats(i) };
                            b.extend([xh.slice(..), y.slice(..)]);
                            b.extend($extra);
                            enc.dispatch(&$k, $groups, &b, &$push).unwrap();
                        });
                        let e = err(&y.read::<f32>(0, n).unwrap());
                        let gbs = (mats * wbytes) as f64 / us / 1e3;
                        line += &format!(" | {} {us:>7.2} us {gbs:>5.0} GB/s err {e:.0e}", $label);
                    }};
                }
                // The kernel replaced.
                let old = d
                    .pipeline(matvec_batch_cm(dt, gated, rows).unwrap())
                    .unwrap();
                let (push, g) = MatvecBatchCmPush::new(dt, rows, cols, tokens);
                chain!("cm", old, g, Vec::<sluice::BufferSlice>::new(), push, false);
                // The split kernels, every shape the format has (the model runs the one
                // matvec_batch_cmt_layout picks, or for Q4_K / Q6_K the register-built one).
                let mut shapes = vec![StagedShape::KSteps, StagedShape::Rows];
                if matvec_batch_cmdq(dt, gated).is_some() {
                    shapes.push(StagedShape::Registers);
                }
                if dt == WeightDtype::F16 {
                    shapes.push(StagedShape::RegistersF16);
                }
                for (shape, target) in shapes
                    .into_iter()
                    .flat_map(|s| targets.iter().map(move |&t| (s, t)))
                {
                    let lay =
                        matvec_batch_staged_layout_aiming(shape, rows, cols, tokens, gated, target);
                    let k = d.pipeline(lay.kernel(dt, gated).unwrap()).unwrap();
                    let (part, tick) = staged_scratch(d, &lay);
                    let push = push.staged(&lay);
                    let name = match shape {
                        StagedShape::KSteps => "cmt",
                        StagedShape::Rows => "cmr",
                        StagedShape::Registers => "cmd",
                        StagedShape::RegistersF16 => "cmdk",
                    };
                    let label = format!(
                        "{name} k{} g{}",
                        lay.ksplit,
                        lay.groups.iter().product::<u32>()
                    );
                    let both = lay.both_forms(dt);
                    let push = if both && gated {
                        push.with_up_at(ws.up_at())
                    } else {
                        push
                    };
                    chain!(
                        label,
                        k,
                        lay.groups,
                        [part.slice(..), tick.slice(..)],
                        push,
                        both
                    );
                }
                // The weights' operands built in registers (f16, no K split): 32 tokens per
                // workgroup (cmd; the engine's LM heads and prefill chunks) and 64 (cmd64;
                // prefill chunks).
                if dt == WeightDtype::F16 {
                    let forms = if gated {
                        [
                            ("cmd", &MATVEC_BATCH_CMD_F16_SILU, 32),
                            ("cmd64", &MATVEC_BATCH_CMD64_F16_SILU, 64),
                        ]
                    } else {
                        [
                            ("cmd", &MATVEC_BATCH_CMD_F16, 32),
                            ("cmd64", &MATVEC_BATCH_CMD64_F16, 64),
                        ]
                    };
                    for (label, desc, per_group) in forms {
                        if per_group > 32 && tokens <= 32 {
                            continue;
                        }
                        let k = d.pipeline(desc).unwrap();
                        let (g, gx) = matvec_batch_cmd_groups(per_group, rows, tokens, gated);
                        let p = MatvecBatchCmPush {
                            row_groups_x: gx,
                            ..push
                        };
                        chain!(label, k, g, Vec::<sluice::BufferSlice>::new(), p, false);
                    }
                    // The tiled matmul (prefill chunks of many tokens).
                    if tokens >= 64 {
                        let desc = if gated {
                            &MATMUL_TILE_F16_SILU
                        } else {
                            &MATMUL_TILE_F16
                        };
                        let k = d.pipeline(desc).unwrap();
                        let (g, gx) = matmul_tile_groups(rows, tokens, gated);
                        let p = MatvecBatchCmPush {
                            row_groups_x: gx,
                            ..push
                        };
                        chain!("tile", k, g, Vec::<sluice::BufferSlice>::new(), p, false);
                    }
                }
                println!("{line}");
            }
        }
    }
}

/// See the module docs (`occ`).
fn occ_bench(d: &Device) {
    let occ = buffer(d, "occ", 16, ResourceClass::TokenScratch);
    for (bytes, desc) in OCCUPANCY_PROBES {
        let name = format!("{} KB", bytes / 1024);
        let k = match d.pipeline(desc) {
            Ok(k) => k,
            Err(e) => {
                println!("probe {name:<6} refused: {e}");
                continue;
            }
        };
        for iters in [2000u32, 20000] {
            occ.write(0, &[0u32; 4]).unwrap();
            let groups = 132 * 20;
            let t = std::time::Instant::now();
            let mut enc = d.encoder().unwrap();
            enc.dispatch(
                &k,
                [groups, 1, 1],
                &[occ.slice(..)],
                &OccupancyPush { iters, pad: 0 },
            )
            .unwrap();
            enc.submit().unwrap().wait().unwrap();
            let got = occ.read::<u32>(0, 4).unwrap();
            println!(
                "probe {name:<6} 128 inv  iters {iters:>5}: {groups} groups, at most {} at once ({:.2}/SM of 132), {:.0} us",
                got[1],
                got[1] as f64 / 132.0,
                t.elapsed().as_secs_f64() * 1e6
            );
        }
    }
}

/// See the module docs (`i8mm`).
fn i8mm_bench(d: &Device, reps: u32) {
    if !d.info().coopmat_s8_16x16x32 {
        println!("no int8 matrix units");
        return;
    }
    let shapes: &[(&str, u32, u32)] = &[
        ("4b qkv", 6144, 2560),
        ("4b o", 2560, 4096),
        ("4b gate", 9728, 2560),
        ("4b down", 2560, 9728),
        ("0.6b qkv", 4096, 1024),
        ("0.6b gate", 3072, 1024),
        ("0.6b down", 1024, 3072),
        ("0.6b lm_head", 151936, 1024),
    ];
    let dt = WeightDtype::Q4K;
    let budget = 512u64 << 20;
    let mut rnd = uniform(5);
    for &(name, rows, cols) in shapes {
        let gated = name.ends_with("gate");
        let base = 64usize;
        let src: Vec<f32> = (0..base * cols as usize).map(|_| rnd(0.2)).collect();
        let packed = pack_weights(dt, base, cols as usize, &src);
        let mats = if gated { 2 } else { 1 };
        let ws = Copies::new(d, &packed, base, rows, mats, budget);
        let wbytes = ws.wbytes;
        for tokens in [1u32, 8, 32, 64] {
            let (qs, ds) = act_q8_strides(cols);
            let words: Vec<u32> = (0..tokens.next_multiple_of(16) * qs)
                .map(|i| i.wrapping_mul(2654435761))
                .collect();
            let blocks: Vec<f32> = (0..tokens * ds)
                .flat_map(|_| [0.01, rnd(1.0), rnd(1.0), 0.0])
                .collect();
            let xq = buffer(d, "xq", words.len() as u64 * 4, ResourceClass::TokenScratch);
            xq.write(0, &words).unwrap();
            let xd = buffer(
                d,
                "xd",
                blocks.len() as u64 * 4,
                ResourceClass::TokenScratch,
            );
            xd.write(0, &blocks).unwrap();
            let padded = tokens.next_multiple_of(16);
            let xh = buffer(
                d,
                "xh",
                (padded * cols) as u64 * 2,
                ResourceClass::TokenScratch,
            );
            xh.write(0, &vec![0x3c00u16; (padded * cols) as usize])
                .unwrap();
            let y = buffer(
                d,
                "y",
                (tokens * rows) as u64 * 4,
                ResourceClass::TokenScratch,
            );
            let mut line = format!(
                "{:<5} {name:<12} {rows:>6}x{cols:<5} t{tokens:<3}",
                dt.name()
            );
            let mut report = |label: &str, us: f64| {
                let gbs = (mats * wbytes) as f64 / us / 1e3;
                line += &format!(" | {label} {us:>8.2} us {gbs:>5.0} GB/s");
            };
            let mats_at = |i: u32| ws.mats(i);
            // Integer dot products.
            let k = d.pipeline(matvec_batch_dp(dt, gated).unwrap()).unwrap();
            let (push, groups) = MatvecBatchDpPush::new(dt, rows, cols, tokens);
            let us = time_chain(d, reps, |enc, i| {
                let mut b = mats_at(i);
                b.extend([xq.slice(..), xd.slice(..), y.slice(..)]);
                if gated {
                    b.extend([y.slice(..), y.slice(..)]);
                }
                enc.dispatch(&k, groups, &b, &push).unwrap();
            });
            report("dp", us);
            // Int8 matrix units.
            let k = d.pipeline(matvec_batch_i8mm(dt, gated).unwrap()).unwrap();
            let (push, groups) = MatvecBatchI8mmPush::new(dt, rows, cols, tokens);
            let us = time_chain(d, reps, |enc, i| {
                let mut b = mats_at(i);
                b.extend([xq.slice(..), xd.slice(..), y.slice(..)]);
                enc.dispatch(&k, groups, &b, &push).unwrap();
            });
            report("i8mm", us);
            // The staged f16 matrix-unit kernel the model picks.
            let lay = matvec_batch_cmt_layout(dt, rows, cols, tokens, gated);
            let k = d.pipeline(lay.kernel(dt, gated).unwrap()).unwrap();
            let (part, tick) = staged_scratch(d, &lay);
            let (cpush, _) = MatvecBatchCmPush::new(dt, rows, cols, tokens);
            let cpush = cpush.staged(&lay);
            let us = time_chain(d, reps, |enc, i| {
                let mut b = mats_at(i);
                b.extend([xh.slice(..), y.slice(..), part.slice(..), tick.slice(..)]);
                enc.dispatch(&k, lay.groups, &b, &cpush).unwrap();
            });
            let label = match lay.shape {
                StagedShape::KSteps => "cmt",
                StagedShape::Rows => "cmr",
                StagedShape::Registers => "cmd",
                StagedShape::RegistersF16 => "cmdk",
            };
            report(label, us);
            println!("{line}");
        }
    }
}

/// `attn` mode: see the module docs.
fn attn_bench(d: &Device, reps: u32) {
    // Reads `bytes` (up to 4 GiB) in dispatches of at most 512 MiB.
    let pf = d.pipeline(&PREFETCH).unwrap();
    let junk: Vec<Buffer> = (0..8)
        .map(|_| buffer(d, "junk", 512 << 20, ResourceClass::ReadOnlyWeight))
        .collect();
    let (x0, sink) = (
        buffer(d, "x0", 16, ResourceClass::TokenScratch),
        buffer(d, "sink", 256, ResourceClass::TokenScratch),
    );
    let flush = |enc: &mut sluice::Encoder, bytes: u64| {
        for (i, j) in junk.iter().enumerate() {
            let part = bytes.saturating_sub(i as u64 * (512 << 20)).min(512 << 20);
            if part == 0 {
                break;
            }
            let pp = PrefetchPush {
                sectors: (part / 32) as u32,
                threads: 264 * 256,
                magic: 0x9E37_79B9,
            };
            let s = [j.slice(..part), x0.slice(..), sink.slice(..)];
            enc.dispatch(&pf, [264, 1, 1], &s, &pp).unwrap();
        }
    };
    let rope = d.pipeline(&ATTENTION_ROPE).unwrap();
    let rope_q8 = d.pipeline(&ATTENTION_ROPE_Q8).unwrap();
    for (name, heads, kv_heads) in [("0.6b", 16u32, 8u32), ("4b", 32, 8)] {
        let (hd, capacity, chunk) = (128u32, 4352u32, 256u32);
        let splits = attention_splits(capacity, chunk, heads);
        let cache = (kv_heads * capacity * hd * 2) as u64;
        let copies = (256u64 << 20).div_ceil(2 * cache).max(2) as usize;
        let caches: Vec<(Buffer, Buffer)> = (0..copies).map(|_| ones_caches(d, cache)).collect();
        let (q_dim, kv_dim) = (heads * hd, kv_heads * hd);
        let qkv = buffer(
            d,
            "qkv",
            ((q_dim + 2 * kv_dim) * 4) as u64,
            ResourceClass::TokenScratch,
        );
        qkv.write(
            0,
            &(0..q_dim + 2 * kv_dim)
                .map(|i| ((i % 17) as f32 - 8.0) * 0.05)
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let norm = buffer(d, "norm", (hd * 4) as u64, ResourceClass::ReadOnlyWeight);
        norm.write(0, &vec![1.0f32; hd as usize]).unwrap();
        let part = buffer(
            d,
            "part",
            (heads * splits * (hd + 2) * 4) as u64,
            ResourceClass::TokenScratch,
        );
        // The output floats, then o's q8 records (attention_rope_q8).
        let q8_at = (q_dim * 4).next_multiple_of(256) / 4;
        let out = buffer(
            d,
            "out",
            ((q8_at + q_dim / 32 * Q8_RECORD_FLOATS) * 4) as u64,
            ResourceClass::TokenScratch,
        );
        let counters = filled(
            d,
            "counters",
            &vec![0u32; heads as usize],
            ResourceClass::TokenScratch,
        );
        for depth in [16u32, 64, 128, 256, 512, 1024, 4096] {
            let params = depth_params(d, depth);
            let mut row = format!("attention_rope {name:<5} depth {depth:>5}:");
            for (what, kernel, at) in [("float", &rope, 0), ("q8", &rope_q8, q8_at)] {
                let p = AttnRopePush {
                    heads,
                    kv_heads,
                    head_dim: hd,
                    capacity,
                    chunk,
                    splits,
                    scale: 0.088,
                    flags: ROPE_NORM,
                    eps: 1e-6,
                    theta: 1.0e6,
                    k_offset: q_dim,
                    v_offset: q_dim + kv_dim,
                    q8_at: at,
                };
                let mut attn = |enc: &mut sluice::Encoder, i: u32| {
                    let (kc, vc) = &caches[i as usize % copies];
                    let s = [
                        params.slice(..),
                        qkv.slice(..),
                        norm.slice(..),
                        norm.slice(..),
                        kc.slice(..),
                        vc.slice(..),
                        part.slice(..),
                        counters.slice(..),
                        out.slice(..),
                    ];
                    enc.dispatch(kernel, [splits, heads, 1], &s, &p).unwrap();
                };
                let us = time(d, reps, &mut attn);
                // Another kernel before each: one reading 1 MiB (the attention's code
                // leaves the multiprocessors' instruction caches), 256 MiB (its code and
                // its q|k|v leave L2 too) or 4 GiB (more pages than a decode step's
                // weights: address translations leave their caches too).
                let after_small = time_after(d, reps, |enc, _| flush(enc, 1 << 20), &mut attn);
                let after_big = time_after(d, reps, |enc, _| flush(enc, 256 << 20), &mut attn);
                let after_huge = time_after(d, reps, |enc, _| flush(enc, 4 << 30), &mut attn);
                row.push_str(&format!(
                    " {what} {us:>6.2} us (after reading 1 MiB {after_small:>6.2}, 256 MiB {after_big:>6.2}, 4 GiB {after_huge:>6.2})"
                ));
            }
            println!("{row}");
        }
    }
    // The same for the integer-dot Q4_K decode matvec at the 4B's gate and o shapes
    // (weights rotating over >= 256 MiB of copies).
    let dt = WeightDtype::Q4K;
    let k = d
        .pipeline(matvec_kernel("matvec", dt, d.info().int_dot).unwrap())
        .unwrap();
    for (name, rows, cols) in [("4b gate", 9728u32, 2560u32), ("4b o", 2560, 4096)] {
        let m = cold_matvec(d, dt, rows, cols, 256 << 20);
        let (ws, x, y, push, groups) = (&m.ws, &m.x, &m.y, m.push, m.groups);
        let mut mv = |enc: &mut sluice::Encoder, i: u32| {
            let w = &ws[i as usize % ws.len()];
            let s = [w.slice(..), x.slice(..), y.slice(..)];
            enc.dispatch(&k, groups, &s, &push).unwrap();
        };
        let us = time(d, reps, &mut mv);
        let after: Vec<f64> = [1u64 << 20, 256 << 20, 4 << 30]
            .iter()
            .map(|&b| time_after(d, reps, |enc, _| flush(enc, b), &mut mv))
            .collect();
        println!(
            "matvec q4_k {name:<8} {rows}x{cols}: {us:>6.2} us (after reading 1 MiB {:>6.2}, 256 MiB {:>6.2}, 4 GiB {:>6.2})",
            after[0], after[1], after[2]
        );
    }
}

/// The batched paged attention kernels at the Qwen3-0.6B / 4B head shapes: `rows` rows of
/// as many sequences, each at position `ctx - 1` with its blocks of 16 positions scattered
/// over the pool, f16 output (the matrix-unit o's input), one split per row; a chain of
/// dispatches over rotating caches (>= 256 MiB); each kernel's output against the first
/// kernel's (max abs difference).
fn battn_bench(d: &Device, reps: u32) {
    let kernels: [(&str, &sluice::KernelDesc, bool); 3] = [
        ("mha", &BATCH_ATTENTION, false),
        ("gqa", &BATCH_ATTENTION_GQA, true),
        ("gqa_hd128", &BATCH_ATTENTION_GQA_HD128, true),
    ];
    // `hot`: one copy of the caches (L2-resident where they fit).
    let hot = std::env::args().nth(3).as_deref() == Some("hot");
    let pipes: Vec<_> = kernels.iter().map(|k| d.pipeline(k.1).unwrap()).collect();
    let block = 16u32;
    let mut rnd = uniform(11);
    for (name, heads, kv_heads) in [("0.6b", 16u32, 8u32), ("4b", 32, 8)] {
        let hd = 128u32;
        for (rows, ctx) in [
            (8u32, 144u32),
            (16, 144),
            (32, 144),
            (64, 144),
            (32, 512),
            (32, 2048),
            (8, 4096),
        ] {
            let shape = BattnShape {
                heads,
                kv_heads,
                hd,
                rows,
                ctx,
                block,
            };
            let (bufs, p) = BattnBufs::new(d, shape, hot, &mut rnd);
            let n_out = (rows * heads * hd / 2) as usize;
            let kv_mb = (rows * kv_heads * ctx * hd * 4) as f64 / 1e6;
            let mut line =
                format!("battn {name:<4} rows {rows:>2} ctx {ctx:>4} ({kv_mb:>6.1} MB k+v):");
            let mut first: Option<Vec<f32>> = None;
            let bindings = |i: u32, rope: bool| bufs.bindings(i, rope);
            for ((kname, plain, gqa), pipe) in kernels.iter().zip(&pipes) {
                let groups = if *gqa {
                    kv_heads * (heads / kv_heads).div_ceil(BATCH_ATTENTION_GQA_HEADS)
                } else {
                    heads
                };
                let mut attn = |enc: &mut sluice::Encoder, i: u32| {
                    enc.dispatch(pipe, [groups, rows, 1], &bindings(i, false), &p)
                        .unwrap();
                };
                let us = time(d, reps, &mut attn);
                let got: Vec<f32> = bufs
                    .out
                    .read::<u32>(0, n_out)
                    .unwrap()
                    .iter()
                    .flat_map(|&w| {
                        [
                            half::f16::from_bits(w as u16).to_f32(),
                            half::f16::from_bits((w >> 16) as u16).to_f32(),
                        ]
                    })
                    .collect();
                let diff = first.as_ref().map_or(0.0, |f| {
                    f.iter()
                        .zip(&got)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0.0f32, f32::max)
                });
                if first.is_none() {
                    first = Some(got);
                }
                line.push_str(&format!(
                    " {kname} {us:>6.2} us {:>5.0} GB/s (diff {diff:.1e})",
                    kv_mb * 1e-3 / (us * 1e-6)
                ));
                // The same with batch_rope folded in (q, k and v from the q buffer, unit
                // norm weights; it appends each row's last key: timing only).
                let rope = d
                    .pipeline(batch_attention_rope_kernel(plain).unwrap())
                    .unwrap();
                let us = time(d, reps, |enc, i| {
                    enc.dispatch(&rope, [groups, rows, 1], &bindings(i, true), &p)
                        .unwrap();
                });
                line.push_str(&format!(" {kname}_rope {us:>6.2} us"));
            }
            println!("{line}");
        }
    }
}

/// The buffers of a batched attention bench: rows, block table, q, rotating caches, the
/// output, a 16-byte placeholder and unit norm weights.
struct BattnBufs {
    rb: Buffer,
    table: Buffer,
    qb: Buffer,
    caches: Vec<(Buffer, Buffer)>,
    out: Buffer,
    none: Buffer,
    ones: Buffer,
}

/// A batched attention bench's shape: head counts and dims, rows of `ctx` positions each,
/// blocks of `block` positions.
#[derive(Clone, Copy)]
struct BattnShape {
    heads: u32,
    kv_heads: u32,
    hd: u32,
    rows: u32,
    ctx: u32,
    block: u32,
}

impl BattnBufs {
    /// Every row at its last position, its blocks a scrambled permutation of the pool's,
    /// random queries and caches (rotating copies of >= 256 MiB, one with `hot`); and the
    /// push constants.
    fn new(
        d: &Device,
        s: BattnShape,
        hot: bool,
        rnd: &mut impl FnMut(f32) -> f32,
    ) -> (Self, BatchAttnPush) {
        let BattnShape {
            heads,
            kv_heads,
            hd,
            rows,
            ctx,
            block,
        } = s;
        let max_blocks = ctx.div_ceil(block);
        let capacity = rows * max_blocks * block;
        // Slot s's blocks: a scrambled permutation of the pool's.
        let mut ids: Vec<u32> = (0..rows * max_blocks).collect();
        let mut seed = 7u32;
        for i in (1..ids.len()).rev() {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            ids.swap(i, (seed >> 8) as usize % (i + 1));
        }
        let rws: Vec<u32> = (0..rows).flat_map(|r| [ctx - 1, r]).collect();
        let q: Vec<f32> = (0..rows * heads * hd).map(|_| rnd(2.0)).collect();
        let words = (kv_heads * capacity * hd / 2) as usize;
        let copies = if hot {
            1
        } else {
            (256u64 << 20).div_ceil(8 * words as u64).max(2) as usize
        };
        let data: Vec<u32> = (0..words)
            .map(|_| {
                let a = half::f16::from_f32(rnd(2.0)).to_bits() as u32;
                let b = half::f16::from_f32(rnd(2.0)).to_bits() as u32;
                a | b << 16
            })
            .collect();
        let bufs = BattnBufs {
            rb: filled(d, "rows", &rws, ResourceClass::Generic),
            table: filled(d, "table", &ids, ResourceClass::Generic),
            qb: filled(d, "q", &q, ResourceClass::TokenScratch),
            caches: (0..copies)
                .map(|_| {
                    (
                        filled(d, "kc", &data, ResourceClass::AppendOnlyKv),
                        filled(d, "vc", &data, ResourceClass::AppendOnlyKv),
                    )
                })
                .collect(),
            out: buffer(
                d,
                "out",
                (rows * heads * hd * 2) as u64,
                ResourceClass::TokenScratch,
            ),
            none: buffer(d, "none", 16, ResourceClass::TokenScratch),
            ones: filled(
                d,
                "ones",
                &vec![1.0f32; hd as usize],
                ResourceClass::Generic,
            ),
        };
        // f16 output, one split, Qwen3's RoPE and norm epsilon.
        let p = BatchAttnPush {
            heads,
            kv_heads,
            head_dim: hd,
            capacity,
            q_stride: heads * hd,
            o_stride: heads * hd,
            scale: 1.0 / (hd as f32).sqrt(),
            block,
            max_blocks,
            out_f16: 1,
            q8: 0,
            q8_words: 0,
            q8_blocks: 0,
            chunk: 0,
            splits: 1,
            rope_flags: ROPE_NORM,
            eps: 1e-6,
            theta: 1e6,
            k_stride: heads * hd,
            v_stride: heads * hd,
        };
        (bufs, p)
    }

    /// Dispatch i's bindings: rotating caches; with `rope` also the _rope forms' k and v
    /// (the q buffer) and unit norm weights.
    fn bindings(&self, i: u32, rope: bool) -> Vec<sluice::BufferSlice<'_>> {
        let (kc, vc) = &self.caches[i as usize % self.caches.len()];
        let none = self.none.slice(..);
        let mut b = vec![
            self.rb.slice(..),
            self.table.slice(..),
            self.qb.slice(..),
            kc.slice(..),
            vc.slice(..),
            self.out.slice(..),
            kc.slice(..),
            vc.slice(..),
            none,
            none,
            none,
            none,
        ];
        if rope {
            b.extend([
                self.qb.slice(..),
                self.qb.slice(..),
                self.ones.slice(..),
                self.ones.slice(..),
                none,
                none,
            ]);
        }
        b
    }
}

/// One register-built batched matvec at 32 tokens over rotating weight copies (`pair`).
struct PairMatvec {
    k: std::sync::Arc<sluice::Pipeline>,
    groups: [u32; 3],
    push: MatvecBatchCmtPush,
    ws: Copies,
    xh: Buffer,
    y: Buffer,
    part: Buffer,
    tick: Buffer,
    both: bool,
}

impl PairMatvec {
    fn new(d: &Device, dt: WeightDtype, rows: u32, cols: u32, gated: bool) -> Self {
        Self::with_budget(d, dt, rows, cols, gated, 512 << 20)
    }

    /// `new` with about `budget` bytes of weight copies (0: one copy).
    fn with_budget(
        d: &Device,
        dt: WeightDtype,
        rows: u32,
        cols: u32,
        gated: bool,
        budget: u64,
    ) -> Self {
        let tokens = 32u32;
        let base = 64usize;
        let mut rnd = uniform(5);
        let src: Vec<f32> = (0..base * cols as usize).map(|_| rnd(0.2)).collect();
        let packed = pack_weights(dt, base, cols as usize, &src);
        let mats = if gated { 2 } else { 1 };
        let ws = Copies::new(d, &packed, base, rows, mats, budget);
        let xbits: Vec<u16> = (0..tokens * cols)
            .map(|_| half::f16::from_f32(rnd(2.0)).to_bits())
            .collect();
        let xh = filled(d, "xh", &xbits, ResourceClass::TokenScratch);
        let y = buffer(
            d,
            "y",
            (tokens * rows) as u64 * 4,
            ResourceClass::TokenScratch,
        );
        let shape = if dt == WeightDtype::F16 {
            StagedShape::RegistersF16
        } else {
            StagedShape::Registers
        };
        let lay = matvec_batch_staged_layout_aiming(shape, rows, cols, tokens, gated, None);
        let k = d.pipeline(lay.kernel(dt, gated).unwrap()).unwrap();
        let (part, tick) = staged_scratch(d, &lay);
        let push = MatvecBatchCmPush::new(dt, rows, cols, tokens)
            .0
            .staged(&lay);
        let both = lay.both_forms(dt);
        let push = if both && gated {
            push.with_up_at(ws.up_at())
        } else {
            push
        };
        PairMatvec {
            both,
            k,
            groups: lay.groups,
            push,
            ws,
            xh,
            y,
            part,
            tick,
        }
    }

    fn record(&self, enc: &mut sluice::Encoder, i: u32) {
        self.record_x(enc, i, &self.xh);
    }

    /// `record` with the activations from `x` (another kernel's output).
    fn record_x(&self, enc: &mut sluice::Encoder, i: u32, x: &Buffer) {
        let mut b = if self.both {
            vec![self.ws.whole(i)]
        } else {
            self.ws.mats(i)
        };
        b.extend([
            x.slice(..),
            self.y.slice(..),
            self.part.slice(..),
            self.tick.slice(..),
        ]);
        enc.dispatch(&self.k, self.groups, &b, &self.push).unwrap();
    }
}

/// See the module docs (`pair`): µs, medians of `reps` dispatches, the weights and caches
/// rotating so that L2 cannot serve them (but the kinds marked `hot`).
fn pair_bench(d: &Device, reps: u32) {
    if !coopmat_self_test(d).unwrap() {
        println!("no cooperative matrices");
        return;
    }
    let o = PairMatvec::new(d, WeightDtype::Q4K, 2560, 4096, false);
    let gate = PairMatvec::new(d, WeightDtype::Q4K, 9728, 2560, true);
    let o16 = PairMatvec::new(d, WeightDtype::F16, 2560, 4096, false);
    let down6 = PairMatvec::new(d, WeightDtype::Q6K, 2560, 9728, false);
    // The gate/up's bytes through the plain kernel (o's pipeline).
    let gu_plain = PairMatvec::new(d, WeightDtype::Q4K, 19456, 2560, false);
    // The 0.6B's shapes, one copy (L2-resident) and rotating.
    let small = |budget| {
        [
            PairMatvec::with_budget(d, WeightDtype::Q4K, 1024, 2048, false, budget),
            PairMatvec::with_budget(d, WeightDtype::Q4K, 3072, 1024, true, budget),
            PairMatvec::with_budget(d, WeightDtype::F16, 2048, 1024, false, budget),
            PairMatvec::with_budget(d, WeightDtype::Q6K, 1024, 3072, false, budget),
        ]
    };
    let hot = small(0);
    let cold = small(512 << 20);
    // act_f16 of 32 tokens x 2560.
    let act = d.pipeline(&ACT_F16).unwrap();
    let ax = filled(
        d,
        "ax",
        &vec![0.5f32; 32 * 2560],
        ResourceClass::TokenScratch,
    );
    let anw = filled(d, "anw", &vec![1.0f32; 2560], ResourceClass::Generic);
    let axh = buffer(d, "axh", 32 * 2560 * 2, ResourceClass::TokenScratch);
    let ap = ActF16Push {
        cols: 2560,
        tokens: 32,
        x_stride: 2560,
        h_words: 1280,
        norm: 1,
        eps: 1e-6,
    };
    // The 4B's attention: 32 rows at 144 positions, the _rope form.
    let (heads, kv_heads, rows) = (32u32, 8u32, 32u32);
    let shape = BattnShape {
        heads,
        kv_heads,
        hd: 128,
        rows,
        ctx: 144,
        block: 16,
    };
    let (bufs, p) = BattnBufs::new(d, shape, false, &mut uniform(3));
    let attn = d
        .pipeline(batch_attention_rope_kernel(&BATCH_ATTENTION_GQA_HD128).unwrap())
        .unwrap();
    let groups = kv_heads * (heads / kv_heads).div_ceil(BATCH_ATTENTION_GQA_HEADS);
    type Rec<'a> = Box<dyn Fn(&mut sluice::Encoder, u32) + 'a>;
    let plain = d.pipeline(&BATCH_ATTENTION_GQA_HD128).unwrap();
    let addk = d.pipeline(&ADD).unwrap();
    let add_y = buffer(d, "add_y", 32 * 2560 * 4, ResourceClass::TokenScratch);
    let out = &bufs.out;
    let attn_bindings = |i: u32, rope: bool| bufs.bindings(i, rope);
    let plain_rec = |enc: &mut sluice::Encoder, i: u32| {
        enc.dispatch(&plain, [groups, rows, 1], &attn_bindings(i, false), &p)
            .unwrap();
    };
    let attn_rec = |enc: &mut sluice::Encoder, i: u32| {
        enc.dispatch(&attn, [groups, rows, 1], &attn_bindings(i, true), &p)
            .unwrap();
    };
    let act_rec = |enc: &mut sluice::Encoder, _: u32| {
        enc.dispatch(
            &act,
            [32, 1, 1],
            &[ax.slice(..), anw.slice(..), axh.slice(..)],
            &ap,
        )
        .unwrap();
    };
    // Each consumer reading its producer's output, as in the step.
    for (name, us) in [
        (
            "o q4_k reading attn_rope's output",
            time_after(d, reps, attn_rec, |enc, i| o.record_x(enc, i, out)),
        ),
        (
            "o q4_k after attn_rope, own x",
            time_after(d, reps, attn_rec, |enc, i| o.record(enc, i)),
        ),
        (
            "o f16 reading attn_rope's output",
            time_after(d, reps, attn_rec, |enc, i| o16.record_x(enc, i, out)),
        ),
        (
            "gate q4_k reading act_f16's output",
            time_after(d, reps, act_rec, |enc, i| gate.record_x(enc, i, &axh)),
        ),
        (
            "gate q4_k after act_f16, own x",
            time_after(d, reps, act_rec, |enc, i| gate.record(enc, i)),
        ),
    ] {
        println!("{name:<40} {us:>6.2} us");
    }
    let kinds: Vec<(&str, Rec)> = vec![
        ("o q4_k", Box::new(|enc, i| o.record(enc, i))),
        ("gate q4_k", Box::new(|enc, i| gate.record(enc, i))),
        ("o f16", Box::new(|enc, i| o16.record(enc, i))),
        ("act_f16", Box::new(act_rec)),
        ("attn_rope", Box::new(attn_rec)),
        ("attn plain", Box::new(|enc, i| plain_rec(enc, i))),
        ("down q6_k", Box::new(|enc, i| down6.record(enc, i))),
        ("s o hot", Box::new(|enc, i| hot[0].record(enc, i))),
        ("s gate hot", Box::new(|enc, i| hot[1].record(enc, i))),
        ("s f16 hot", Box::new(|enc, i| hot[2].record(enc, i))),
        ("s q6 hot", Box::new(|enc, i| hot[3].record(enc, i))),
        ("s o", Box::new(|enc, i| cold[0].record(enc, i))),
        ("s gate", Box::new(|enc, i| cold[1].record(enc, i))),
        ("s f16", Box::new(|enc, i| cold[2].record(enc, i))),
        ("s q6", Box::new(|enc, i| cold[3].record(enc, i))),
        ("gu plain", Box::new(|enc, i| gu_plain.record(enc, i))),
        (
            "add",
            Box::new(|enc, _| {
                enc.dispatch(
                    &addk,
                    [320, 1, 1],
                    &[ax.slice(..), add_y.slice(..)],
                    &CountPush { n: 32 * 2560 },
                )
                .unwrap();
            }),
        ),
    ];
    // Kernels in a cycle (kinds' indices), a timestamp after each: each one's median.
    let cycle = |order: &[usize]| {
        let n = order.len() as u32;
        let mut all = |enc: &mut sluice::Encoder, i: u32| {
            for &k in order {
                kinds[k].1(enc, i);
            }
        };
        warm_up(d, reps, &mut all);
        let q = TimestampQueries::new(d, reps * n + 1).unwrap();
        let mut enc = d.encoder().unwrap();
        enc.set_barrier_mode(sluice::BarrierMode::Serial);
        enc.write_timestamp(&q, 0).unwrap();
        for i in 0..reps {
            for (j, &k) in order.iter().enumerate() {
                kinds[k].1(&mut enc, i);
                enc.write_timestamp(&q, i * n + j as u32 + 1).unwrap();
            }
        }
        enc.submit().unwrap().wait().unwrap();
        let ts = q.read_ns().unwrap();
        let mut line = String::from("cycle:");
        for (j, &k) in order.iter().enumerate() {
            let v: Vec<f64> = (1..reps as usize)
                .map(|i| (ts[i * n as usize + j + 1] - ts[i * n as usize + j]) / 1000.0)
                .collect();
            line.push_str(&format!(" {} {:>6.2} |", kinds[k].0, median(v)));
        }
        println!("{line}");
    };
    // Kinds: 0 o q4_k, 1 gate q4_k, 2 o f16, 3 act_f16, 4 attention (rope folded), 5
    // attention, 6 down q6_k, 7-10 the 0.6B's o, gate, f16 and Q6_K matrices L2-resident,
    // 11-14 the same rotating, 15 the gate/up's bytes as one plain matrix, 16 add.
    for order in [
        // Alone.
        &[1usize][..],
        &[15],
        &[16],
        &[7],
        &[8],
        &[9],
        &[10],
        &[11],
        &[12],
        &[13],
        &[14],
        // Two to five kinds.
        &[0, 4],
        &[4, 5],
        &[0, 1, 2],
        &[0, 2, 4],
        &[0, 1, 4],
        &[4, 5, 0],
        &[3, 1, 0],
        &[3, 1, 0, 2],
        &[0, 1, 2, 6],
        &[3, 0, 1, 6],
        &[3, 0, 1, 16],
        &[3, 0, 1, 6, 16],
        &[3, 0, 1, 2, 6],
        &[3, 1, 0, 4, 2],
        &[7, 8, 9, 10],
        &[3, 7, 8, 9, 10],
        &[11, 12, 13, 14],
        &[3, 11, 12, 13, 14],
        // A layer of the 4B Q4_K_M step (act, q|k|v, attention, o, act, gate/up, down), with
        // the gate/up as a plain matrix (one kernel fewer), the attention unfolded, down in
        // Q4_K.
        &[3, 0, 4, 0, 3, 1, 6],
        &[3, 0, 4, 0, 3, 15, 6],
        &[3, 0, 5, 0, 3, 1, 6],
        &[3, 0, 5, 0, 3, 15, 6],
        &[3, 0, 4, 0, 3, 1, 0],
        &[3, 0, 4, 0, 3, 15, 0],
    ] {
        cycle(order);
    }
    for (name, rec) in kinds.iter().take(7) {
        let mut line = format!("{name:<10} after:");
        for (before, brec) in kinds.iter().take(7) {
            let us = time_after(d, reps, |enc, i| brec(enc, i + 7), |enc, i| rec(enc, i));
            line.push_str(&format!(" {before} {us:>6.2} |"));
        }
        let chain = time(d, reps, |enc, i| rec(enc, i));
        line.push_str(&format!(" chain {chain:>6.2}"));
        println!("{line}");
    }
}
