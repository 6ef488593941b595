//! The batched step over the paged KV cache, end to end on a tiny model: every row of a
//! batch of sequences (different prompts and lengths, joining at different steps) against
//! its own CPU reference, and batch invariance — a sequence's logits are bit-identical
//! whether it runs alone or among others, in direct and replay mode.

use sluice::graph::GraphOptions;
use sluice::testing::{coopmat_or_test_device, ValidationGuard};
use sluice::Device;
use sluice_llm::batch::BatchRunner;
use sluice_llm::config::ModelConfig;
use sluice_llm::decode::Mode;
use sluice_llm::gpu::{
    BatchRow, PagedOptions, BLOCK_ROWS_LARGE_LAYER_WEIGHTS, BLOCK_ROWS_MATRIX_UNITS_MIN_SEQUENCES,
};
use sluice_llm::load::{open_model, LoadOptions, Loaded};
use sluice_llm::reference::CpuModel;
use sluice_llm::safetensors::DType;
use sluice_llm::sampler::argmax;
use sluice_llm::weights::DEFAULT_SEED;
use sluice_llm::LlmError;

fn load(d: &Device, name: &str, fuse: bool) -> Loaded {
    open_model(d, &format!("synthetic:{name}"), &options(fuse), |_, _| {}).unwrap()
}

/// The options of [`load`].
fn options(fuse: bool) -> LoadOptions {
    let mut o = LoadOptions::default();
    o.gpu.fuse_norm = fuse;
    o.gpu.fuse_gate_up = fuse;
    o.gpu.prefill_chunk = 8; // prompts of several chunks
    o.gpu.batch_attention_split = Some(12); // contexts of up to 48: one to four splits
                                            // A pool of 40 blocks of 4 positions shared by 4 slots of up to 48 positions.
    o.gpu.context = 160;
    o.gpu.paged = Some(PagedOptions {
        max_rows: 4,
        sequences: 4,
        seq_context: 48,
        block: 4,
    });
    o
}

fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

fn prompt(seed: u32, len: usize, vocab: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i * 37 + seed * 11 + 3) % vocab as u32)
        .collect()
}

/// Rows of three sequences, teacher-forced with their CPU references' argmax.
fn batch_matches_cpu(name: &str, fuse: bool) {
    let d = coopmat_or_test_device();
    let _guard = ValidationGuard::new(&d);
    let loaded = load(&d, name, fuse);
    let cfg = ModelConfig::synthetic(name).unwrap();
    let mut runner =
        BatchRunner::new(&loaded.model, Mode::Replay, GraphOptions::default()).unwrap();
    let prompts = [
        prompt(1, 11, cfg.vocab),
        prompt(2, 1, cfg.vocab),
        prompt(3, 19, cfg.vocab),
    ];
    let mut cpus: Vec<CpuModel> = (0..3)
        .map(|_| CpuModel::synthetic(&cfg, DEFAULT_SEED, DType::F16).unwrap())
        .collect();
    let mut seqs = Vec::new(); // (slot, next token, position)
    let mut worst = 0f32;
    for (i, p) in prompts.iter().enumerate() {
        let slot = runner.open().unwrap();
        let first = runner.prefill(slot, p).unwrap();
        let mut want = Vec::new();
        for &t in p {
            want = cpus[i].forward(t).unwrap();
        }
        worst = worst.max(rel_err(&runner.logits(0, true).unwrap(), &want));
        assert_eq!(
            first.index,
            argmax(&want).unwrap(),
            "{name}: prompt {i} first token"
        );
        seqs.push((slot, first.index, p.len()));
    }
    let mut agree = 0;
    for _ in 0..12 {
        let res = runner.decode(&seqs).unwrap();
        for (i, s) in seqs.iter_mut().enumerate() {
            let want = cpus[i].forward(s.1).unwrap();
            worst = worst.max(rel_err(&runner.logits(i, false).unwrap(), &want));
            let cpu_next = argmax(&want).unwrap();
            agree += (res[i].index == cpu_next) as usize;
            *s = (s.0, cpu_next, s.2 + 1);
        }
    }
    eprintln!(
        "{name} (fused {fuse}): worst relative logit error {worst:.2e}, agreement {agree}/36"
    );
    // Prompt rows go through the matmul family, which on matrix units rounds x to f16.
    let tol = if loaded.model.uses_coopmat() {
        4e-3
    } else {
        2e-3
    };
    assert!(
        worst < tol,
        "{name}: worst relative logit error {worst} (bound {tol})"
    );
    assert!(agree >= 35, "{name}: greedy agreed on {agree}/36 rows");
}

#[test]
fn batched_rows_match_cpu_reference_qwen3() {
    batch_matches_cpu("tiny", true);
    // Four query heads per key/value head: the grouped-query attention kernel (its split
    // partials a vec4 per value), and its head_dim-128 form.
    batch_matches_cpu("tiny-gqa", true);
    batch_matches_cpu("tiny-gqa128", true);
    // Projections of 2048+ rows: on matrix units the register-built kernel with K split.
    batch_matches_cpu("tiny-wide", true);
}

#[test]
fn batched_rows_match_cpu_reference_llama_unfused() {
    batch_matches_cpu("tiny-llama", false);
}

#[test]
fn batched_rows_match_cpu_reference_qwen2_and_llama3() {
    batch_matches_cpu("tiny-qwen2", true);
    batch_matches_cpu("tiny-llama3", true);
}

/// Greedy decode of `target` (prompt, steps) with `others` joining at given steps; returns
/// the target's tokens and the bits of its logits at every step.
fn run_with_others(
    runner: &mut BatchRunner<'_>,
    target: &[u32],
    steps: usize,
    others: &[(usize, Vec<u32>)],
) -> (Vec<u32>, Vec<Vec<u32>>) {
    // Others that start at step 0 run their prompt before the target.
    let mut live: Vec<(u32, u32, usize)> = Vec::new(); // (slot, token, pos)
    let start = |runner: &mut BatchRunner<'_>, p: &[u32]| {
        let slot = runner.open().unwrap();
        let first = runner.prefill(slot, p).unwrap();
        (slot, first.index, p.len())
    };
    for (at, p) in others {
        if *at == 0 {
            live.push(start(runner, p));
        }
    }
    let t = start(runner, target);
    let target_slot = t.0;
    live.insert(live.len() / 2, t); // not always row 0
    let (mut tokens, mut logits) = (vec![t.1], Vec::new());
    for step in 1..=steps {
        for (at, p) in others {
            if *at == step {
                live.push(start(runner, p));
            }
        }
        let res = runner.decode(&live).unwrap();
        for (i, s) in live.iter_mut().enumerate() {
            if s.0 == target_slot {
                tokens.push(res[i].index);
                let l = runner.logits(i, false).unwrap();
                logits.push(l.iter().map(|v| v.to_bits()).collect());
            }
            *s = (s.0, res[i].index, s.2 + 1);
        }
    }
    for (slot, _, _) in live {
        runner.close(slot);
    }
    assert_eq!(runner.pool().in_use(), 0, "every block back in the pool");
    // Distinct logits at several steps: a run stuck on one token (tiny random models fall
    // into one) would let a stale output pass the bit-for-bit comparisons.
    let distinct = logits
        .iter()
        .enumerate()
        .filter(|(i, l)| logits[..*i].iter().all(|p| p != *l))
        .count();
    assert!(
        distinct >= 4,
        "only {distinct} distinct logit rows in {steps} steps"
    );
    (tokens, logits)
}

#[test]
fn a_sequence_decodes_bit_identically_alone_and_batched() {
    let d = coopmat_or_test_device();
    let _guard = ValidationGuard::new(&d);
    // tiny-wide: on matrix units its projections run the K-split register-built kernel.
    for name in ["tiny", "tiny-wide"] {
        let loaded = load(&d, name, true);
        let vocab = loaded.model.config().vocab;
        let target = prompt(5, 9, vocab);
        let others = vec![
            (0, prompt(6, 17, vocab)),
            (2, prompt(7, 3, vocab)),
            (5, prompt(8, 12, vocab)),
        ];
        for mode in [Mode::Direct, Mode::Replay] {
            let mut runner =
                BatchRunner::new(&loaded.model, mode, GraphOptions::default()).unwrap();
            let alone = run_with_others(&mut runner, &target, 10, &[]);
            let batched = run_with_others(&mut runner, &target, 10, &others);
            assert_eq!(
                alone.0, batched.0,
                "{name} {mode:?}: tokens alone vs batched"
            );
            assert!(
                alone.1 == batched.1,
                "{name} {mode:?}: logits alone vs batched differ in bits"
            );
        }
    }
}

/// The batched engine with its tables split over bindings (portable kernels on a device
/// bound to 28 KiB at once, `Options::max_binding`: the tiny model's 32 KiB tied
/// embedding and LM head in two parts) decodes a sequence among others with the tokens and
/// logits of the whole-table engine, bit for bit.
#[test]
fn a_batch_with_its_tables_split_over_bindings_decodes_the_same() {
    let run = |max_binding: Option<u64>| {
        let d = sluice::testing::test_device_with(sluice::Options {
            no_coopmat: true,
            max_binding,
            ..sluice::Options::default()
        });
        let _guard = ValidationGuard::new(&d);
        let loaded = open_model(&d, "synthetic:tiny", &options(true), |_, _| {}).unwrap();
        let parts = if max_binding.is_some() { 2 } else { 1 };
        assert_eq!(loaded.model.table_parts(), (parts, parts));
        let vocab = loaded.model.config().vocab;
        let others = vec![(0, prompt(6, 17, vocab)), (2, prompt(7, 3, vocab))];
        let mut runner =
            BatchRunner::new(&loaded.model, Mode::Replay, GraphOptions::default()).unwrap();
        run_with_others(&mut runner, &prompt(5, 9, vocab), 10, &others)
    };
    let whole = run(None);
    let split = run(Some(28 * 1024));
    assert_eq!(split.0, whole.0, "tokens");
    assert!(split.1 == whole.1, "logits differ in bits");
}

/// Decode-only steps (a row per sequence) run batch_rope inside the attention kernel (its
/// `_rope` forms: one dispatch fewer per layer); a sequence's tokens and logits are bit for
/// bit those of the unfused step, for every batched attention kernel (one head per
/// workgroup, grouped, grouped at head_dim 128), with splits, q/k/v biases (Qwen2) and
/// scaled RoPE (Llama 3.1). Steps with prompt rows keep batch_rope.
#[test]
fn decode_only_steps_fold_batch_rope_bit_for_bit() {
    let d = coopmat_or_test_device();
    let _guard = ValidationGuard::new(&d);
    for name in [
        "tiny",
        "tiny-gqa",
        "tiny-gqa128",
        "tiny-qwen2",
        "tiny-llama3",
    ] {
        let folded = load(&d, name, true);
        let mut o = options(true);
        o.gpu.fuse_attention = false;
        let plain = open_model(&d, &format!("synthetic:{name}"), &o, |_, _| {}).unwrap();
        assert!(folded.model.batch_rope_folds(), "{name}");
        assert!(!plain.model.batch_rope_folds(), "{name}");
        let vocab = folded.model.config().vocab;
        let layers = folded.model.config().layers as u64;
        // One row per sequence: folded, a dispatch fewer per layer; a prompt row beside a
        // decode row of the same sequence's slot: not folded.
        let row = |pos, slot| BatchRow {
            token: 1,
            pos,
            slot,
        };
        let mut counts = Vec::new();
        for rows in [vec![row(3, 0), row(5, 1)], vec![row(3, 0), row(4, 0)]] {
            for m in [&folded.model, &plain.model] {
                m.set_batch_rows(&rows).unwrap();
                let mut enc = m.device().encoder().unwrap();
                m.encode_batch(&mut enc, 2, false).unwrap();
                counts.push(enc.counters().dispatches);
            }
        }
        assert_eq!(
            counts[0] + layers,
            counts[1],
            "{name}: decode-only dispatches"
        );
        assert_eq!(counts[2], counts[3], "{name}: a step with prompt rows");
        let target = prompt(5, 9, vocab);
        let others = vec![(0, prompt(6, 17, vocab)), (2, prompt(7, 3, vocab))];
        let mut runs = Vec::new();
        for m in [&folded.model, &plain.model] {
            let mut runner = BatchRunner::new(m, Mode::Replay, GraphOptions::default()).unwrap();
            runs.push(run_with_others(&mut runner, &target, 12, &others));
        }
        assert_eq!(runs[0].0, runs[1].0, "{name}: tokens folded vs not");
        assert!(
            runs[0].1 == runs[1].1,
            "{name}: logits folded vs not differ in bits"
        );
    }
}

/// Steps recorded ahead (every row bucket at every attention depth, decode steps and prompt
/// chunks) cover every step a run takes: nothing is recorded later, and the tokens and
/// logits are bit for bit those of a runner that records as it goes.
#[test]
fn steps_recorded_ahead_cover_every_step_and_replay_the_same_bits() {
    let d = coopmat_or_test_device();
    let _guard = ValidationGuard::new(&d);
    let loaded = load(&d, "tiny", true);
    // Splits of 12 positions at least, up to 48: 1..=4 splits, depths rounded to 1, 2, 4.
    assert_eq!(loaded.model.batch_attention_depths(), [1, 2, 4]);
    let vocab = loaded.model.config().vocab;
    // Short prompts: the steps cross from depth 1 to 2 (13 positions) and 4 (25).
    let target = prompt(5, 3, vocab);
    let others = vec![(0, prompt(6, 5, vocab)), (6, prompt(7, 4, vocab))];
    let graph = GraphOptions::default();
    let mut ahead = BatchRunner::new(&loaded.model, Mode::Replay, graph).unwrap();
    // 4 decode rows at most: buckets 1, 2, 4; prompt chunks of up to 8: 1, 2, 4, 8.
    assert_eq!(ahead.row_buckets(false), [1, 2, 4]);
    assert_eq!(ahead.row_buckets(true), [1, 2, 4, 8]);
    let mut seen = Vec::new();
    let made = ahead
        .record_ahead(false, |done, total| seen.push((done, total)))
        .unwrap()
        + ahead.record_ahead(true, |_, _| {}).unwrap();
    // Steps with logits for every row twice: decode-only ones fold batch_rope into the
    // attention, those with prompt rows do not.
    assert!(loaded.model.batch_rope_folds());
    assert_eq!(made, 3 * 2 * 3 + 4 * 3);
    assert_eq!(seen, (1..=18).map(|i| (i, 18)).collect::<Vec<_>>());
    assert_eq!(
        ahead.record_ahead(false, |_, _| {}).unwrap(),
        0,
        "all recorded"
    );
    let with = run_with_others(&mut ahead, &target, 20, &others);
    assert_eq!(
        ahead.recordings(),
        made,
        "a step recorded after the recording ahead"
    );
    let mut lazy = BatchRunner::new(&loaded.model, Mode::Replay, graph).unwrap();
    let without = run_with_others(&mut lazy, &target, 20, &others);
    assert!(
        lazy.recordings() > 3,
        "the run reached several buckets and depths"
    );
    assert_eq!(with.0, without.0, "tokens");
    assert!(with.1 == without.1, "logits differ in bits");
    // A runner whose every-row steps carry no prompt rows records only their decode-only
    // form ahead, and that covers a run on it.
    let mut chunked = BatchRunner::new(&loaded.model, Mode::Replay, graph).unwrap();
    chunked.set_prompt_rows(false);
    assert_eq!(chunked.record_ahead(false, |_, _| {}).unwrap(), 3 * 3);
    assert_eq!(chunked.record_ahead(true, |_, _| {}).unwrap(), 4 * 3);
    let chunk_run = run_with_others(&mut chunked, &target, 20, &others);
    assert_eq!(chunked.recordings(), 3 * 3 + 4 * 3, "a step recorded late");
    assert_eq!(chunk_run.0, without.0, "tokens");
    assert!(chunk_run.1 == without.1, "logits differ in bits");
    // Direct mode records nothing ahead.
    let mut direct = BatchRunner::new(&loaded.model, Mode::Direct, graph).unwrap();
    assert_eq!(direct.record_ahead(false, |_, _| {}).unwrap(), 0);
}

#[test]
fn pool_and_slot_limits_are_errors() {
    let d = coopmat_or_test_device();
    let _guard = ValidationGuard::new(&d);
    let loaded = load(&d, "tiny", true);
    let mut runner =
        BatchRunner::new(&loaded.model, Mode::Direct, GraphOptions::default()).unwrap();
    let slots: Vec<u32> = (0..4).map(|_| runner.open().unwrap()).collect();
    assert!(runner.open().is_err(), "a fifth slot");
    // Longer than a sequence may be.
    let e = runner.reserve(slots[0], 49).unwrap_err();
    assert!(matches!(e, LlmError::ContextFull { context: 48 }), "{e}");
    // 39 usable blocks of 4: three full sequences take 36, the fourth gets 3, then fails.
    for &s in &slots[..3] {
        runner.reserve(s, 48).unwrap();
    }
    runner.reserve(slots[3], 12).unwrap();
    let e = runner.reserve(slots[3], 13).unwrap_err();
    assert!(
        matches!(
            e,
            LlmError::KvPoolFull {
                in_use: 39,
                total: 39,
                block: 4
            }
        ),
        "{e}"
    );
    // A row past what its slot holds is refused before any GPU work.
    let row = BatchRow {
        token: 1,
        pos: 12,
        slot: slots[3],
    };
    assert!(runner.step(&[row], false).is_err());
    runner.close(slots[0]);
    runner.reserve(slots[3], 13).unwrap();
}

/// A block-format model (llama.cpp's Q4_K_M mixture: q4_k and q6_k matrices) on the
/// batched step, in engines of 4 sequence slots (decode rows on the integer-dot batched
/// matvec where the device has integer dot products, else the single-token kernels; prompt
/// chunks on the matrix units where the device has them) and 32 (decode rows too:
/// `BLOCK_ROWS_MATRIX_UNITS_MIN_SEQUENCES`): a sequence's logits are bit-identical alone
/// and among others, and its logits follow the single-sequence decoder on the same weights
/// (bound 5e-2 as for the int-dot kernels in e2e.rs: x quantized to int8 per 32 amplifies
/// the f32 differences of the two attention kernels), greedy tokens on at least 7 of 9.
#[test]
fn a_quantized_sequence_decodes_alone_batched_and_like_the_decoder() {
    use sluice_llm::decode::Decoder;
    use sluice_llm::quant_mix::{QuantKind, QuantRequest};
    let d = coopmat_or_test_device();
    let _guard = ValidationGuard::new(&d);
    let name = "tiny-256";
    let cfg = ModelConfig::synthetic(name).unwrap();
    let quant = |paged: Option<usize>| {
        let mut o = LoadOptions {
            dtype: Some(QuantRequest {
                kind: QuantKind::Q4KM,
                tied_embeddings: cfg.tied_embeddings,
                tensor_types: Default::default(),
            }),
            ..LoadOptions::default()
        };
        o.gpu.prefill_chunk = 8;
        o.gpu.batch_attention_split = Some(12);
        o.gpu.context = if paged.is_some() { 160 } else { 48 };
        if let Some(sequences) = paged {
            o.gpu.paged = Some(PagedOptions {
                max_rows: 4,
                sequences,
                seq_context: 48,
                block: 4,
            });
        }
        open_model(&d, &format!("synthetic:{name}"), &o, |_, _| {}).unwrap()
    };
    // The single-sequence decoder on the same quantized weights (contiguous KV cache).
    let single = quant(None);
    let decoder = Decoder::new(&single.model, Mode::Replay, GraphOptions::default()).unwrap();
    for sequences in [4, BLOCK_ROWS_MATRIX_UNITS_MIN_SEQUENCES] {
        let int_dot = d.info().int_dot;
        let loaded = quant(Some(sequences));
        quantized_batch_check(&loaded, &cfg, &single, &decoder, sequences, int_dot);
    }
}

/// One engine of [`a_quantized_sequence_decodes_alone_batched_and_like_the_decoder`].
fn quantized_batch_check(
    loaded: &Loaded,
    cfg: &ModelConfig,
    single: &Loaded,
    decoder: &sluice_llm::decode::Decoder,
    sequences: usize,
    int_dot: bool,
) {
    assert_eq!(loaded.dtype, "q4_k+q6_k");
    // Which linear ops of the decode rows run on the matrix units: none in small engines
    // (integer dot products), every op from BLOCK_ROWS_MATRIX_UNITS_MIN_SEQUENCES slots
    // (this model's layers are small); none without matrix units.
    let (m, linear) = (&loaded.model, 4 * cfg.layers + 1);
    assert!(cfg.layer_projection_weights() < BLOCK_ROWS_LARGE_LAYER_WEIGHTS);
    assert_eq!(
        m.block_rows_on_matrix_units(),
        sequences >= BLOCK_ROWS_MATRIX_UNITS_MIN_SEQUENCES
    );
    let want = match sequences {
        _ if !m.uses_coopmat() => 0,
        s if s >= BLOCK_ROWS_MATRIX_UNITS_MIN_SEQUENCES => linear,
        _ => 0,
    };
    assert_eq!(m.batch_matrix_unit_ops(), want, "{sequences} slots");
    // Prompt chunks: every op on the matrix units in every engine that has them.
    let chunk = if m.uses_coopmat() { linear } else { 0 };
    assert_eq!(
        m.chunk_matrix_unit_ops(),
        chunk,
        "{sequences} slots, chunks"
    );
    // Where o and down run on integer dot products, the attention and the gate/up hand
    // them int8 blocks.
    let handoffs = if int_dot && want < linear {
        cfg.layers
    } else {
        0
    };
    assert_eq!(m.batch_q8_handoff_layers(), handoffs, "{sequences} slots");
    assert_eq!(
        m.batch_mlp_q8_handoff_layers(),
        handoffs,
        "{sequences} slots"
    );
    // The layers whose v has another format than q and k (Q4_K_M's mixture) run q|k and v
    // side by side: one barrier fewer per such layer than dispatches in a step.
    let splits = m.split_qkv_layers() as u64;
    assert!(
        splits > 0 && splits < cfg.layers as u64,
        "{splits} split layers"
    );
    let mut enc = loaded.model.device().encoder().unwrap();
    m.encode_batch(&mut enc, 3, false).unwrap();
    assert_eq!(enc.counters().barriers_elided, splits, "{sequences} slots");
    drop(enc);
    let target = prompt(5, 9, cfg.vocab);
    let others = vec![(0, prompt(6, 17, cfg.vocab)), (3, prompt(7, 3, cfg.vocab))];
    let mut runner =
        BatchRunner::new(&loaded.model, Mode::Replay, GraphOptions::default()).unwrap();
    let alone = run_with_others(&mut runner, &target, 8, &[]);
    let batched = run_with_others(&mut runner, &target, 8, &others);
    assert_eq!(alone.0, batched.0, "tokens alone vs batched");
    assert!(
        alone.1 == batched.1,
        "logits alone vs batched differ in bits"
    );
    // The prompt's last token: the decoder takes its matvec there, the batched prompt chunk
    // the matmul family (f16 activations on matrix units), so the first token only counts
    // toward the agreement.
    let first = decoder.prefill(&target, 0).unwrap();
    let (mut agree, mut worst) = ((first == alone.0[0]) as usize, 0f32);
    for (i, bits) in alone.1.iter().enumerate() {
        // Teacher-forced with the batched run's tokens.
        let token = decoder.step(alone.0[i], target.len() + i).unwrap();
        let want = single.model.logits().unwrap();
        let got: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
        let err = rel_err(&got, &want);
        assert!(
            err < 5e-2,
            "step {i}: relative logit error {err} vs the decoder"
        );
        worst = worst.max(err);
        agree += (token == alone.0[i + 1]) as usize;
    }
    eprintln!(
        "q4_k_m batched ({sequences} slots) vs decoder: worst relative logit error {worst:.2e}, greedy {agree}/9"
    );
    assert!(
        agree >= 7,
        "greedy agreed with the decoder on {agree}/9 tokens"
    );
}
