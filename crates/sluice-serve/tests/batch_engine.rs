//! `BatchEngine` without the HTTP layer, on a tiny model: with prompts mixed into the
//! decode steps (the default) and with separate prompt chunks, a sequence's greedy tokens
//! are the same alone and among others that join at different steps (and, f16, the CPU
//! reference's greedy tokens); a prompt takes as many steps as its budget per step says
//! (`mixed_prompt_rows`: the step's prompt tokens, rounded up to the row group, within the
//! row limit).

use sluice::graph::GraphOptions;
use sluice::testing::{coopmat_or_test_device, ValidationGuard};
use sluice::Device;
use sluice_llm::batch::BatchRunner;
use sluice_llm::config::ModelConfig;
use sluice_llm::decode::Mode;
use sluice_llm::gpu::PagedOptions;
use sluice_llm::load::{open_model, LoadOptions, Loaded};
use sluice_llm::quant_mix::{QuantKind, QuantRequest};
use sluice_llm::reference::CpuModel;
use sluice_llm::safetensors::DType;
use sluice_llm::sampler::{argmax, Sampling};
use sluice_llm::weights::DEFAULT_SEED;
use sluice_serve::batch_engine::{mixed_prompt_rows, BatchEngine, PromptSteps};
use sluice_serve::engine::{Engine, SeqId};

/// Sequence slots of the test engines, the rows one step takes, prompt tokens per mixed step.
const SLOTS: usize = 4;
const MAX_ROWS: usize = SLOTS + 3;
const STEP_PROMPT: usize = 3;

fn load(d: &Device, name: &str, q4_k_m: bool) -> Loaded {
    let cfg = ModelConfig::synthetic(name).unwrap();
    let mut o = LoadOptions::default();
    if q4_k_m {
        o.dtype = Some(QuantRequest {
            kind: QuantKind::Q4KM,
            tied_embeddings: cfg.tied_embeddings,
            tensor_types: Default::default(),
        });
    }
    o.gpu.prefill_chunk = 8; // chunk steps of several chunks per prompt
    o.gpu.batch_attention_split = Some(16); // contexts of up to 48: one to three attention splits
    o.gpu.context = 192;
    o.gpu.paged = Some(PagedOptions {
        max_rows: MAX_ROWS,
        sequences: SLOTS,
        seq_context: 48,
        block: 4,
    });
    open_model(d, &format!("synthetic:{name}"), &o, |_, _| {}).unwrap()
}

fn prompt(seed: u32, len: usize, vocab: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i * 29 + seed * 13 + 5) % vocab as u32)
        .collect()
}

/// What one run saw of sequence 0: its tokens, and the steps from its admission to its
/// first token.
struct Run {
    tokens: Vec<u32>,
    first_after: usize,
}

/// Runs `target` (sequence 0, admitted before step `target_at`) for `n` tokens;
/// `others[i] = (step, prompt)` is admitted before that step (after the target when both
/// join at one step) and runs until the target is done.
fn run(
    engine: &mut BatchEngine<'_>,
    target: &[u32],
    target_at: usize,
    n: usize,
    others: &[(usize, Vec<u32>)],
) -> Run {
    let greedy = Sampling::default();
    assert!(greedy.is_greedy());
    let mut out = Run {
        tokens: Vec::new(),
        first_after: 0,
    };
    let mut step = 0;
    while out.tokens.len() < n {
        if step == target_at {
            engine.add(0, target.to_vec(), greedy).unwrap();
        }
        for (i, (at, p)) in others.iter().enumerate() {
            if *at == step {
                engine.add(i as SeqId + 1, p.clone(), greedy).unwrap();
            }
        }
        step += 1;
        for (id, r) in engine.step() {
            let t = r.unwrap_or_else(|e| panic!("sequence {id} failed: {e}"));
            if id == 0 {
                if out.tokens.is_empty() {
                    out.first_after = step - target_at;
                }
                out.tokens.push(t);
            }
        }
        assert!(step < 200, "no progress after {step} steps");
    }
    for id in 0..=others.len() as SeqId {
        engine.free(id);
    }
    assert_eq!(engine.running(), 0);
    out
}

/// The CPU reference's greedy tokens for `prompt` (f16 weights).
fn cpu_greedy(cfg: &ModelConfig, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut cpu = CpuModel::synthetic(cfg, DEFAULT_SEED, DType::F16).unwrap();
    let mut logits = Vec::new();
    for &t in prompt {
        logits = cpu.forward(t).unwrap();
    }
    let mut out = Vec::new();
    while out.len() < n {
        let t = argmax(&logits).unwrap();
        out.push(t);
        logits = cpu.forward(t).unwrap();
    }
    out
}

fn check(name: &str, q4_k_m: bool) {
    let d = coopmat_or_test_device();
    let _guard = ValidationGuard::new(&d);
    let loaded = load(&d, name, q4_k_m);
    let cfg = ModelConfig::synthetic(name).unwrap();
    let vocab = cfg.vocab;
    let target = prompt(1, 17, vocab);
    let cpu = (!q4_k_m).then(|| cpu_greedy(&cfg, &target, 10));
    // Two short prompts one step before the target (decoding while its prompt runs), one
    // long prompt joining while the target is in its prompt.
    let others = vec![
        (0, prompt(2, 2, vocab)),
        (0, prompt(3, 1, vocab)),
        (3, prompt(4, 23, vocab)),
    ];
    let mixed = PromptSteps::Mixed {
        tokens: STEP_PROMPT,
    };
    for prompts in [mixed, PromptSteps::Chunks] {
        let runner =
            BatchRunner::new(&loaded.model, Mode::Replay, GraphOptions::default()).unwrap();
        // Steps for the target's 17 prompt tokens beside `decode` decoding sequences.
        let group = runner.row_group();
        let steps = |decode: usize| {
            let per = mixed_prompt_rows(decode, STEP_PROMPT, group, MAX_ROWS);
            17usize.div_ceil(per)
        };
        let mut engine = BatchEngine::new(runner, prompts);
        assert_eq!(engine.max_sequences(), SLOTS);
        let alone = run(&mut engine, &target, 0, 10, &[]);
        let batched = run(&mut engine, &target, 1, 10, &others);
        assert_eq!(
            alone.tokens, batched.tokens,
            "{name} (q4_k_m {q4_k_m}, {prompts:?}): alone vs batched"
        );
        if let Some(want) = &cpu {
            assert_eq!(
                &alone.tokens, want,
                "{name} ({prompts:?}) vs the CPU reference"
            );
        }
        let want = match prompts {
            // Alone: 3 per step where rows grow one by one (6 steps), 7 (the row limit)
            // on the matrix units' groups of 64 (3 steps). Beside the two decoding
            // sequences: 3 (6 steps), or the 5 rows the limit leaves (5 + 5 + 5 + 2). The
            // long prompt, younger, gets what the target leaves.
            PromptSteps::Mixed { .. } => (steps(0), steps(2)),
            // Chunks of 8 alone (8 + 8 + 1); batched, the older second short prompt takes
            // the first chunk step after the target joins.
            PromptSteps::Chunks => (3, 4),
        };
        assert_eq!(
            (alone.first_after, batched.first_after),
            want,
            "{name} ({prompts:?}): steps to the first token alone / batched"
        );
    }
}

#[test]
fn mixed_and_chunked_prompts_decode_alike_alone_and_batched_f16() {
    check("tiny", false);
}

#[test]
fn mixed_and_chunked_prompts_decode_alike_alone_and_batched_q4_k_m() {
    check("tiny-256", true);
}

#[test]
fn mixed_prompt_rows_fill_the_row_group_within_the_limit() {
    // Rows growing one by one: the budget.
    assert_eq!(mixed_prompt_rows(10, 32, 1, 128), 32);
    // Groups of 64: up to the end of the group the step reaches.
    assert_eq!(mixed_prompt_rows(31, 32, 64, 128), 33);
    assert_eq!(mixed_prompt_rows(63, 32, 64, 128), 65);
    assert_eq!(mixed_prompt_rows(64, 32, 64, 128), 64);
    // The row limit, and at least one token.
    assert_eq!(mixed_prompt_rows(63, 32, 64, 96), 33);
    assert_eq!(mixed_prompt_rows(0, 0, 1, 8), 1);
    assert_eq!(mixed_prompt_rows(8, 4, 1, 8), 0);
}
