//! Whole-model checks on whatever Vulkan device exists (lavapipe in CI), validation on:
//! GPU logits vs the f32 CPU reference for tiny Qwen3 and Llama models, Auto == Serial
//! bit for bit, replay == direct bit for bit.

use sluice::graph::GraphOptions;
use sluice::testing::{coopmat_or_test_device_with, ValidationGuard};
use sluice::{BarrierMode, Device, Options};
use sluice_llm::config::ModelConfig;
use sluice_llm::decode::{Decoder, Mode};
use sluice_llm::gpu::Lowering;
use sluice_llm::load::{open_model, LoadOptions, Loaded};
use sluice_llm::reference::CpuModel;
use sluice_llm::safetensors::DType;
use sluice_llm::sampler::argmax;
use sluice_llm::weights::DEFAULT_SEED;

mod common;

fn device(barriers: BarrierMode) -> Device {
    coopmat_or_test_device_with(Options {
        barriers,
        ..Options::default()
    })
}

fn load(d: &Device, name: &str) -> sluice_llm::load::Loaded {
    load_with(d, name, true)
}

fn load_with(d: &Device, name: &str, fuse: bool) -> sluice_llm::load::Loaded {
    load_lowered(d, name, fuse, Lowering::Auto)
}

fn load_lowered(
    d: &Device,
    name: &str,
    fuse: bool,
    lowering: Lowering,
) -> sluice_llm::load::Loaded {
    let mut o = LoadOptions::default();
    o.gpu.lowering = lowering;
    o.gpu.fuse_norm = fuse;
    o.gpu.fuse_gate_up = fuse;
    o.gpu.fuse_attention = fuse;
    o.gpu.context = 128;
    o.gpu.attention_chunk = 16; // several splits even for short sequences
    o.gpu.prefill_chunk = 16; // several chunks (matmuls of 16 and of 5 tokens) per prompt
    open_model(d, &format!("synthetic:{name}"), &o, |_, _| {}).unwrap()
}

/// Max |a - b| relative to max |b|.
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// Decodes `steps` positions of synthetic model `name` from token 1 on the GPU (replay)
/// and on the CPU reference, both fed the CPU's greedy tokens (teacher forcing): the worst
/// relative logit error and the steps whose greedy tokens agree.
fn teacher_forced(loaded: &Loaded, name: &str, steps: usize) -> (f32, usize) {
    let decoder = Decoder::new(&loaded.model, Mode::Replay, GraphOptions::default()).unwrap();
    let cfg = ModelConfig::synthetic(name).unwrap();
    let mut cpu = CpuModel::synthetic(&cfg, DEFAULT_SEED, DType::F16).unwrap();
    let (mut token, mut worst, mut agree) = (1u32, 0f32, 0);
    for pos in 0..steps {
        let want = cpu.forward(token).unwrap();
        let gpu_next = decoder.step(token, pos).unwrap();
        worst = worst.max(rel_err(&loaded.model.logits().unwrap(), &want));
        let cpu_next = argmax(&want).unwrap();
        agree += (gpu_next == cpu_next) as usize;
        token = cpu_next; // teacher forcing: both see the same tokens
    }
    (worst, agree)
}

fn gpu_matches_cpu(name: &str, fuse: bool) {
    let d = device(BarrierMode::Auto);
    let _guard = ValidationGuard::new(&d);
    let loaded = load_with(&d, name, fuse);
    let (worst, agree) = teacher_forced(&loaded, name, 32);
    eprintln!("{name} (fused {fuse}): worst relative logit error {worst:.2e}, greedy agreement {agree}/32");
    // The GPU keeps the KV cache in f16 and sums in another order: a small relative error.
    assert!(worst < 2e-3, "{name}: worst relative logit error {worst}");
    assert!(agree >= 31, "{name}: greedy agreed on {agree}/32 steps");
}

#[test]
fn tiny_qwen3_gpu_matches_cpu_reference() {
    gpu_matches_cpu("tiny", true);
}

#[test]
fn tiny_llama_gpu_matches_cpu_reference() {
    gpu_matches_cpu("tiny-llama", true);
}

#[test]
fn tiny_qwen2_biases_gpu_matches_cpu_reference() {
    gpu_matches_cpu("tiny-qwen2", true);
    gpu_matches_cpu("tiny-qwen2", false);
}

#[test]
fn tiny_llama3_rope_scaling_gpu_matches_cpu_reference() {
    gpu_matches_cpu("tiny-llama3", true);
    gpu_matches_cpu("tiny-llama3", false);
}

/// The default attention chunk (256 at most) with a context past 256 positions: the
/// decode attention's split size follows the context (1 split up to 32 positions, then
/// splits of 32 up to 256, then of 64), under both lowerings; logits vs the CPU reference
/// at every position.
#[test]
fn attention_splits_follow_the_context_and_match_cpu_reference() {
    let d = device(BarrierMode::Auto);
    let _guard = ValidationGuard::new(&d);
    for lowering in [Lowering::Barriers, Lowering::Persistent] {
        let mut o = LoadOptions::default();
        o.gpu.context = 320;
        o.gpu.lowering = lowering;
        let loaded = open_model(&d, "synthetic:tiny", &o, |_, _| {}).unwrap();
        let steps = 270;
        let (worst, agree) = teacher_forced(&loaded, "tiny", steps);
        eprintln!(
            "{lowering:?}: worst relative logit error {worst:.2e}, agreement {agree}/{steps}"
        );
        assert!(
            worst < 2e-3,
            "{lowering:?}: worst relative logit error {worst}"
        );
        assert!(
            agree >= steps - 3,
            "{lowering:?}: greedy agreed on {agree}/{steps} steps"
        );
    }
}

#[test]
fn unfused_kernels_match_cpu_reference_too() {
    gpu_matches_cpu("tiny", false);
    gpu_matches_cpu("tiny-llama", false);
}

fn greedy(d: &Device, mode: Mode, n: usize) -> (Vec<u32>, Vec<f32>) {
    let loaded = load(d, "tiny");
    let decoder = Decoder::new(&loaded.model, mode, GraphOptions::default()).unwrap();
    let tokens = decoder.run_greedy(3, 0, n).unwrap();
    (tokens, loaded.model.logits().unwrap())
}

#[test]
fn auto_and_serial_barriers_give_identical_logits() {
    let (a_tok, a_logits) = {
        let d = device(BarrierMode::Auto);
        let _g = ValidationGuard::new(&d);
        greedy(&d, Mode::Direct, 12)
    };
    let (s_tok, s_logits) = {
        let d = device(BarrierMode::Serial);
        let _g = ValidationGuard::new(&d);
        greedy(&d, Mode::Direct, 12)
    };
    assert_eq!(a_tok, s_tok);
    assert_eq!(
        a_logits.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        s_logits.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
}

#[test]
fn replay_equals_direct_for_64_tokens() {
    let d = device(BarrierMode::Auto);
    let _g = ValidationGuard::new(&d);
    let (direct_tok, direct_logits) = greedy(&d, Mode::Direct, 64);
    let (replay_tok, replay_logits) = greedy(&d, Mode::Replay, 64);
    assert_eq!(direct_tok, replay_tok);
    assert_eq!(
        direct_logits
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>(),
        replay_logits
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    );
}

#[test]
fn replayed_step_is_a_valid_schedule_with_fewer_barriers() {
    let d = device(BarrierMode::Auto);
    // The barrier lowering's graph (a GPU may run this model's layers persistent).
    let loaded = load_lowered(&d, "tiny", true, Lowering::Barriers);
    let in_order = Decoder::graph(
        &loaded.model,
        GraphOptions {
            reorder: false,
            lookahead: 1,
        },
    )
    .unwrap();
    let reordered = Decoder::graph(&loaded.model, GraphOptions::default()).unwrap();
    assert!(sluice::schedule::is_valid(
        reordered.dependencies(),
        reordered.schedule()
    ));
    assert!(sluice::schedule::is_valid(
        in_order.dependencies(),
        in_order.schedule()
    ));
    assert!(reordered.schedule().barriers() <= in_order.schedule().barriers());
    assert_eq!(in_order.nodes().len(), reordered.nodes().len());
    // Fusion removes two norms and the rope/KV-append dispatch per layer, and the final norm.
    let unfused = load_lowered(&d, "tiny", false, Lowering::Barriers);
    let plain = Decoder::graph(&unfused.model, GraphOptions::default()).unwrap();
    let layers = ModelConfig::synthetic("tiny").unwrap().layers;
    // Unfused gate/up is three dispatches (gate, up, silu_mul) instead of one.
    assert_eq!(
        plain.nodes().len(),
        reordered.nodes().len() + 3 * layers + 2 * layers + 1
    );
    assert!(plain.schedule().barriers() > reordered.schedule().barriers());
    // Decode attention is one dispatch per layer (the combine runs in the split kernel), fused
    // or not, and the argmax spreads over several workgroups when the vocabulary asks for it.
    for (what, g) in [("fused", &reordered), ("unfused", &plain)] {
        let kernel_count = |name: &str| {
            g.nodes()
                .iter()
                .filter(|n| n.pipeline.desc().name == name)
                .count()
        };
        let attention = if what == "fused" {
            "attention_rope"
        } else {
            "attention_split"
        };
        assert_eq!(kernel_count(attention), layers, "{what}");
        assert_eq!(kernel_count("attention_combine"), 0, "{what}");
        // The pick's last workgroup also advances the position: no dispatch of its own.
        assert_eq!(kernel_count("advance_params"), 0, "{what}");
        let argmax: Vec<_> = g
            .nodes()
            .iter()
            .filter(|n| n.pipeline.desc().name == "argmax_advance")
            .collect();
        // By default the LM head takes the pick only on a resident grid: not this one.
        assert_eq!(kernel_count("matvec_norm_head_pick_f16"), 0, "{what}");
        assert_eq!(argmax.len(), 1, "{what}");
        let vocab = ModelConfig::synthetic("tiny").unwrap().vocab as u32;
        assert_eq!(argmax[0].groups, [vocab.div_ceil(4096), 1, 1], "{what}");
    }
}

/// The greedy pick folded into the LM head (`GpuOptions::fuse_pick`; here `Some(true)`, so
/// the tiny model's full grid takes it) against a separate argmax dispatch: the same tokens
/// and the same logits bit for bit, through prefill chunks (a pick advancing the position
/// by a chunk) and replayed decode steps that feed themselves, for f16 and an integer-dot
/// format, under both lowerings; the decode step has one dispatch fewer.
#[test]
fn the_head_with_the_pick_matches_head_then_argmax() {
    let d = device(BarrierMode::Auto);
    let _g = ValidationGuard::new(&d);
    let prompt: Vec<u32> = (0..21).map(|i| (i * 37 + 5) % 200).collect();
    for dtype in ["f16", "q8_0"] {
        for lowering in [Lowering::Barriers, Lowering::Persistent] {
            let run = |pick: bool| {
                let mut o = LoadOptions::default();
                o.gpu.fuse_pick = Some(pick);
                o.gpu.lowering = lowering;
                o.gpu.context = 128;
                o.gpu.prefill_chunk = 16; // chunks of 16 and 5 tokens
                let mut request = sluice_llm::quant_mix::parse(dtype).unwrap();
                request.tied_embeddings = ModelConfig::synthetic("tiny").unwrap().tied_embeddings;
                o.dtype = Some(request);
                let loaded = open_model(&d, "synthetic:tiny", &o, |_, _| {}).unwrap();
                let decoder =
                    Decoder::new(&loaded.model, Mode::Replay, GraphOptions::default()).unwrap();
                let first = decoder.prefill(&prompt, 0).unwrap();
                let mut tokens = vec![first];
                tokens.extend(decoder.run_greedy(first, prompt.len(), 12).unwrap());
                let graph = Decoder::graph(&loaded.model, GraphOptions::default()).unwrap();
                (tokens, loaded.model.logits().unwrap(), graph.nodes().len())
            };
            let (tok, logits, nodes) = run(true);
            let (want_tok, want_logits, want_nodes) = run(false);
            let what = format!("{dtype} {lowering:?}");
            assert_eq!(tok, want_tok, "{what}: tokens");
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&logits), bits(&want_logits), "{what}: logits");
            assert_eq!(nodes + 1, want_nodes, "{what}: dispatches per step");
        }
    }
}

#[test]
fn a_model_larger_than_the_device_is_refused_before_upload() {
    let d = device(BarrierMode::Auto);
    let heap: u64 = d
        .heaps()
        .iter()
        .filter(|h| h.device_local)
        .map(|h| h.budget.unwrap_or(h.size))
        .max()
        .unwrap();
    let needs = sluice_llm::load::planned_weight_bytes(
        &ModelConfig::synthetic("qwen3-4b").unwrap(),
        None,
        |_| Ok(sluice_kernels::WeightDtype::F16),
    )
    .unwrap();
    if needs < heap {
        // A device this large fits the model; nothing to refuse here.
        return;
    }
    let t = std::time::Instant::now();
    let err = open_model(
        &d,
        "synthetic:qwen3-4b",
        &LoadOptions::default(),
        |done, _| assert_eq!(done, 0),
    )
    .err()
    .unwrap();
    match &err {
        sluice_llm::LlmError::DoesNotFit {
            needed, available, ..
        } => {
            assert!(needed > available && *needed >= needs, "{err}");
        }
        other => panic!("expected DoesNotFit, got {other}"),
    }
    assert!(err.to_string().contains("GiB"), "{err}");
    assert!(
        t.elapsed().as_secs() < 5,
        "refusal must come before generating or uploading weights"
    );
}

/// The tiny model (f16, its 256 x 64 table tied as the LM head: 32 KiB; its largest layer
/// matrix 24 KiB) on a device that binds at most `max_binding` bytes at once (portable
/// kernels: the same on lavapipe and on a GPU), prefill chunks of 16.
fn tiny_bound_to(max_binding: Option<u64>) -> (Device, Loaded) {
    let d = sluice::testing::test_device_with(Options {
        no_coopmat: true,
        max_binding,
        ..Options::default()
    });
    let mut o = LoadOptions::default();
    o.gpu.context = 128;
    o.gpu.prefill_chunk = 16;
    let loaded = open_model(&d, "synthetic:tiny", &o, |_, _| {});
    (d, loaded.unwrap_or_else(|e| panic!("{max_binding:?}: {e}")))
}

/// A table larger than the device binds at once (maxStorageBufferRange; lavapipe's is 128
/// MiB) is split into parts of whole rows that each fit one
/// binding: bound to 28 KiB (`Options::max_binding`), the tiny model's 32 KiB embedding and
/// tied LM head run as two parts (192 + 64 rows), one embed dispatch and one head matvec
/// per part, and give the whole table's logits and tokens bit for bit, prefill and decode.
#[test]
fn a_table_larger_than_a_binding_is_split() {
    let prompt: Vec<u32> = (0..37u32).map(|i| (i * 31 + 5) % 256).collect();
    let run = |max_binding| {
        let (d, loaded) = tiny_bound_to(max_binding);
        let _guard = ValidationGuard::new(&d);
        let parts = if max_binding.is_some() { 2 } else { 1 };
        assert_eq!(loaded.model.table_parts(), (parts, parts));
        let decoder = Decoder::new(&loaded.model, Mode::Replay, GraphOptions::default()).unwrap();
        let first = decoder.prefill(&prompt, 0).unwrap();
        let logits = loaded.model.logits().unwrap();
        let tokens = decoder.run_greedy(first, prompt.len(), 12).unwrap();
        let direct = Decoder::new(&loaded.model, Mode::Direct, GraphOptions::default()).unwrap();
        direct.step(tokens[3], 5).unwrap();
        (first, logits, tokens, loaded.model.logits().unwrap())
    };
    let whole = run(None);
    let split = run(Some(28 * 1024));
    assert_eq!(split.0, whole.0, "first token");
    assert!(split.1 == whole.1, "prefill logits differ");
    assert_eq!(split.2, whole.2, "greedy continuation");
    assert!(split.3 == whole.3, "decode logits differ");
}

/// A matrix that is not a table and is larger than the device binds at once is refused
/// with its name and the numbers before its upload (Vulkan leaves such a binding
/// undefined): bound to 16 KiB, the tiny model's table splits (two parts of 128 rows) and
/// its first layer's 20 KiB q|k|v is refused.
#[test]
fn a_tensor_larger_than_a_binding_is_refused() {
    let d = sluice::testing::test_device_with(Options {
        no_coopmat: true,
        max_binding: Some(16 * 1024),
        ..Options::default()
    });
    let t = std::time::Instant::now();
    let mut o = LoadOptions::default();
    o.gpu.context = 128;
    o.gpu.prefill_chunk = 16;
    let err = open_model(&d, "synthetic:tiny", &o, |_, _| {})
        .err()
        .unwrap();
    let m = err.to_string();
    assert!(
        m.contains("model.layers.0.self_attn.qkv")
            && m.contains("20480 bytes")
            && m.contains("16384 bytes")
            && m.contains("the max_binding option"),
        "{m}"
    );
    assert!(t.elapsed().as_secs() < 30, "refused at the first layer");
}

/// The loading bar's total is the weight bytes as uploaded for every `--dtype` (a mixture
/// like Q4_K_M puts some matrices in Q6_K, rows that fit no block fall back), so it
/// reaches 100% once, at the end; the same total is what the memory check counts.
#[test]
fn progress_total_is_the_bytes_uploaded() {
    use sluice_llm::quant_mix::parse;
    let d = device(BarrierMode::Auto);
    let _guard = ValidationGuard::new(&d);
    for name in ["tiny", "tiny-256"] {
        let cfg = ModelConfig::synthetic(name).unwrap();
        for dtype in [
            None,
            Some("q8_0"),
            Some("q4_k_m"),
            Some("q5_k_m"),
            Some("q6_k"),
        ] {
            let mut o = LoadOptions::default();
            o.gpu.context = 16;
            o.dtype = dtype.map(|s| parse(s).unwrap());
            let mut calls = Vec::new();
            open_model(&d, &format!("synthetic:{name}"), &o, |done, total| {
                calls.push((done, total))
            })
            .unwrap();
            common::assert_progress_is_exact(&format!("{name} {dtype:?}"), &cfg, &calls);
        }
    }
}

#[test]
fn missing_model_directory_is_a_clear_error() {
    let d = device(BarrierMode::Auto);
    let err = open_model(
        &d,
        "/nonexistent/model-dir",
        &LoadOptions::default(),
        |_, _| {},
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("/nonexistent/model-dir"), "{err}");
}

/// The batched prefill (many prompt tokens per dispatch, chunks of 16) gives the CPU
/// reference's logits after the prompt, and decoding continues from it like after a
/// token-by-token prompt. `fuse` switches every fusion: prefill and decode are lowerings
/// of one layer description, so both must hold either way. One device for all `names`
/// (the NVIDIA driver refuses a process's 31st Vulkan instance).
fn prefill_matches(names: &[&str], fuse: bool) {
    let d = device(BarrierMode::Auto);
    let _guard = ValidationGuard::new(&d);
    for name in names {
        prefill_matches_on(&d, name, fuse);
    }
}

fn prefill_matches_on(d: &Device, name: &str, fuse: bool) {
    let loaded = load_with(d, name, fuse);
    let cfg = ModelConfig::synthetic(name).unwrap();
    let prompt: Vec<u32> = (0..37u32)
        .map(|i| (i * 31 + 5) % cfg.vocab as u32)
        .collect();
    let decoder = Decoder::new(&loaded.model, Mode::Replay, GraphOptions::default()).unwrap();
    assert_eq!(loaded.model.prefill_chunk(), 16);
    let direct = Decoder::new(&loaded.model, Mode::Direct, GraphOptions::default()).unwrap();
    direct.prefill(&prompt, 0).unwrap();
    let recorded_now = loaded.model.logits().unwrap();
    // Replay: each chunk length's prefill recorded once, resubmitted (same bits).
    let first = decoder.prefill(&prompt, 0).unwrap();
    let got = loaded.model.logits().unwrap();
    assert_eq!(
        got, recorded_now,
        "{name}: replayed prefill differs from direct"
    );
    let after_prefill = decoder.run_greedy(first, prompt.len(), 8).unwrap();
    let mut cpu = CpuModel::synthetic(&cfg, DEFAULT_SEED, DType::F16).unwrap();
    let mut want = Vec::new();
    for &t in &prompt {
        want = cpu.forward(t).unwrap();
    }
    let err = rel_err(&got, &want);
    eprintln!("{name} (fused {fuse}): prefill relative logit error {err:.2e}");
    assert!(
        err < 2e-3,
        "{name}: prefill logits differ from the CPU reference by {err}"
    );
    assert_eq!(first, argmax(&want).unwrap());
    // Token by token on the GPU: same continuation.
    let mut t = prompt[0];
    for (pos, &next) in prompt.iter().enumerate().skip(1) {
        decoder.step(t, pos - 1).unwrap();
        t = next;
    }
    let first_steps = decoder.step(t, prompt.len() - 1).unwrap();
    assert_eq!(first_steps, first);
    assert_eq!(
        decoder.run_greedy(first_steps, prompt.len(), 8).unwrap(),
        after_prefill
    );
}

/// `prefill_with_progress` reports 0, each finished chunk and the end, and leaves what
/// `prefill` leaves: the same next token and logits bit for bit.
#[test]
fn prefill_reports_progress_per_chunk() {
    let d = device(BarrierMode::Auto);
    let _g = ValidationGuard::new(&d);
    let loaded = load(&d, "tiny"); // prefill chunks of 16
    let decoder = Decoder::new(&loaded.model, Mode::Replay, GraphOptions::default()).unwrap();
    let prompt: Vec<u32> = (0..40u32).map(|i| (i * 13 + 5) % 256).collect();
    let token = decoder.prefill(&prompt, 0).unwrap();
    let logits = loaded.model.logits().unwrap();
    let mut seen = Vec::new();
    let again = decoder
        .prefill_with_progress(&prompt, 0, &mut |done, total| seen.push((done, total)))
        .unwrap();
    assert_eq!(seen, [(0, 40), (16, 40), (32, 40), (40, 40)]);
    assert_eq!(again, token);
    let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(loaded.model.logits().unwrap()), bits(logits));
    // One chunk: the start and the end.
    seen.clear();
    decoder
        .prefill_with_progress(&prompt[..5], 40, &mut |done, total| {
            seen.push((done, total))
        })
        .unwrap();
    assert_eq!(seen, [(0, 5), (5, 5)]);
    // Generation reports its prompt the same way and generates what `generate` does.
    let opts = sluice_llm::run::GenerateOptions::new(8);
    let plain = sluice_llm::run::generate(&decoder, None, &prompt, &opts, |_, _| {}).unwrap();
    seen.clear();
    let reported = sluice_llm::run::generate_with_progress(
        &decoder,
        None,
        &prompt,
        &opts,
        &mut |done, total| seen.push((done, total)),
        |_, _| {},
    )
    .unwrap();
    assert_eq!(seen, [(0, 40), (16, 40), (32, 40), (40, 40)]);
    assert_eq!(reported.tokens, plain.tokens);
    assert_eq!(reported.tokens.len(), 8);
}

#[test]
fn prefill_stops_between_chunks_when_cancelled() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let d = device(BarrierMode::Auto);
    let _g = ValidationGuard::new(&d);
    let loaded = load(&d, "tiny"); // prefill chunks of 16
    let decoder = Decoder::new(&loaded.model, Mode::Replay, GraphOptions::default()).unwrap();
    let prompt: Vec<u32> = (0..40u32).map(|i| (i * 7 + 3) % 256).collect();
    let token = decoder.prefill(&prompt, 0).unwrap();
    let logits = loaded.model.logits().unwrap();
    // Set after the first chunk: the second (already queued) finishes, the third never
    // starts.
    let cancel = Arc::new(AtomicBool::new(false));
    let mut seen = Vec::new();
    let got = decoder
        .prefill_cancellable(
            &prompt,
            0,
            &mut |done, total| {
                seen.push((done, total));
                cancel.store(done >= 16, Ordering::Relaxed);
            },
            &cancel,
        )
        .unwrap();
    assert_eq!(got, None);
    assert_eq!(seen, [(0, 40), (16, 40)]);
    // Not set: the whole prompt, the same token.
    cancel.store(false, Ordering::Relaxed);
    let again = decoder
        .prefill_cancellable(&prompt, 0, &mut |_, _| {}, &cancel)
        .unwrap();
    assert_eq!(again, Some(token));
    let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(loaded.model.logits().unwrap()), bits(logits));
    // Generation cancelled during its prompt: nothing generated; then uncancelled, the
    // same tokens as a generation that was never cancelled.
    let opts = sluice_llm::run::GenerateOptions {
        cancel: Some(cancel.clone()),
        ..sluice_llm::run::GenerateOptions::new(6)
    };
    let stopped = sluice_llm::run::generate_with_progress(
        &decoder,
        None,
        &prompt,
        &opts,
        &mut |done, _| cancel.store(done >= 16, Ordering::Relaxed),
        |_, _| {},
    )
    .unwrap();
    assert_eq!(stopped.stop_reason, sluice_llm::run::StopReason::Cancelled);
    assert!(stopped.tokens.is_empty());
    cancel.store(false, Ordering::Relaxed);
    let full = sluice_llm::run::generate(&decoder, None, &prompt, &opts, |_, _| {}).unwrap();
    let plain = sluice_llm::run::GenerateOptions::new(6);
    let never = sluice_llm::run::generate(&decoder, None, &prompt, &plain, |_, _| {}).unwrap();
    assert_eq!(full.tokens, never.tokens);
    assert_eq!(full.tokens.first(), Some(&token));
}

#[test]
fn batched_prefill_matches_cpu_reference_and_token_by_token() {
    // tiny-gqa128 and tiny-256 (heads of 128 and 64 dims): on devices with matrix units,
    // the prefill attention on them (`sluice_kernels::ATTENTION_PREFILL_CM`, `_CM64`); the
    // projections of all four run on the batched engine's matrix-unit matvecs there.
    prefill_matches(&["tiny", "tiny-llama", "tiny-gqa128", "tiny-256"], true);
}

#[test]
fn unfused_prefill_matches_cpu_reference_and_token_by_token() {
    prefill_matches(&["tiny", "tiny-llama"], false);
}

#[test]
fn qwen2_and_llama3_prefill_match_cpu_reference_and_token_by_token() {
    prefill_matches(&["tiny-qwen2", "tiny-llama3"], true);
}

#[test]
fn gpu_sampling_is_seeded_and_mode_independent() {
    use sluice_llm::sampler::Sampling;
    let d = device(BarrierMode::Auto);
    let _guard = ValidationGuard::new(&d);
    let run = |sampling: Sampling, mode: Mode| -> Vec<u32> {
        let mut o = LoadOptions::default();
        o.gpu.context = 128;
        o.gpu.sampling = Some(sampling);
        let loaded = open_model(&d, "synthetic:tiny", &o, |_, _| {}).unwrap();
        assert_eq!(loaded.model.samples_on_gpu(), !sampling.is_greedy());
        let decoder = Decoder::new(&loaded.model, mode, GraphOptions::default()).unwrap();
        let host_calls = d.counters().bytes_downloaded;
        let opts = sluice_llm::run::GenerateOptions {
            sampling,
            ..sluice_llm::run::GenerateOptions::new(24)
        };
        let g = sluice_llm::run::generate(&decoder, None, &[1, 2, 3], &opts, |_, _| {}).unwrap();
        assert_eq!(g.tokens.len(), 24);
        // Sampling happened on the GPU: no logits were read back (only token ids).
        assert!(
            d.counters().bytes_downloaded - host_calls < 24 * 64,
            "logits were downloaded"
        );
        g.tokens
    };
    let s = Sampling {
        temperature: 0.9,
        top_k: 40,
        top_p: 0.95,
        seed: 1234,
    };
    let a = run(s, Mode::Replay);
    assert_eq!(a, run(s, Mode::Replay), "same seed, same tokens");
    assert_eq!(a, run(s, Mode::Direct), "replay and direct sample alike");
    assert_ne!(
        a,
        run(Sampling { seed: 99, ..s }, Mode::Replay),
        "another seed, another sequence"
    );
    let greedy = run(Sampling::greedy(), Mode::Replay);
    assert_ne!(a, greedy);
    assert_eq!(
        run(Sampling { top_k: 1, ..s }, Mode::Replay),
        greedy,
        "top-k 1 is greedy"
    );
}

/// A tiny model in each block format (every matrix quantized on load) matches the CPU
/// reference run on the same quantized-then-dequantized weights, 32 teacher-forced steps.
/// Matvecs on their f32 decoders (integer dot products off): only f32 rounding differs.
#[test]
fn quantized_models_match_cpu_reference() {
    quantized_models_vs_cpu(false, 2e-3, 31);
}

/// The same with integer dot products on (the formats that have `_dp` matvecs): the
/// decode matvecs also quantize x to int8 per 32 elements (as llama.cpp's Q8_1
/// activations), an error the f32 CPU reference does not model, hence the looser logit
/// bound (the kernels themselves match their exact CPU model to NMSE 1e-6 in
/// sluice-kernels' quant_ops tests). Greedy agreement stays at >= 31/32.
#[test]
fn quantized_models_int_dot_match_cpu_reference() {
    quantized_models_vs_cpu(true, 5e-2, 28);
}

fn quantized_models_vs_cpu(int_dot: bool, max_err: f32, min_agree: usize) {
    use sluice_kernels::WeightDtype;
    use sluice_llm::load::target_dtype;
    use sluice_llm::quant_mix::{QuantKind, QuantRequest};
    // Validated on lavapipe; on a device with matrix units (the prefill's matmul tiles
    // run there) without the layer, which predates them (sluice::testing).
    let d = coopmat_or_test_device_with(Options {
        no_int_dot: !int_dot,
        ..Options::default()
    });
    assert_eq!(
        d.info().int_dot,
        int_dot,
        "lavapipe has integer dot products"
    );
    let _guard = ValidationGuard::new(&d);
    let name = "tiny-256";
    let cfg = ModelConfig::synthetic(name).unwrap();
    let kinds = sluice_kernels::quant::QUANT_DTYPES
        .map(QuantKind::Uniform)
        .into_iter()
        // llama.cpp's mixture: layer 1's v_proj/down_proj get q6_k, so its q|k|v are split.
        .chain([QuantKind::Q4KM])
        .filter(|k| match k {
            QuantKind::Uniform(dt) => !int_dot || sluice_kernels::has_int_dot(*dt),
            _ => true,
        });
    let mut attn_handoff_models = 0;
    for kind in kinds {
        let request = QuantRequest {
            kind,
            tied_embeddings: cfg.tied_embeddings,
            tensor_types: Default::default(),
        };
        let dt = match kind {
            QuantKind::Uniform(d) => d,
            _ => WeightDtype::Q4K,
        };
        let mut o = LoadOptions {
            dtype: Some(request),
            ..LoadOptions::default()
        };
        o.gpu.context = 64;
        o.gpu.prefill_chunk = 16;
        o.gpu.attention_chunk = 16;
        let loaded = open_model(&d, &format!("synthetic:{name}"), &o, |_, _| {}).unwrap();
        // Every matrix in the format but the LM head (q6_k unless q8_0, as llama.cpp does).
        let want = if dt == WeightDtype::Q8_0 || dt == WeightDtype::Q6K {
            dt.name().to_string()
        } else {
            format!("{}+q6_k", dt.name())
        };
        let want = if kind == QuantKind::Q4KM {
            "q4_k+q6_k".to_string()
        } else {
            want
        };
        assert_eq!(loaded.dtype, want, "{name} {}", dt.name());
        let mut cpu = common::quantized_reference(&cfg, &request);
        if kind == QuantKind::Q4KM {
            // Layers whose v is q6_k run q|k as one stacked matrix and v as another: on
            // integer dot products both in one two-format dispatch (matvec_norm_two), else
            // one q|k|v dispatch more than the others, not two.
            let split = (0..cfg.layers)
                .filter(|i| {
                    let t = |p: &str| {
                        let name = format!("model.layers.{i}.self_attn.{p}.weight");
                        let rows = cfg.heads * cfg.head_dim;
                        target_dtype(Some(&request), &cfg, &name, rows, cfg.hidden, dt)
                    };
                    t("q_proj") != t("v_proj")
                })
                .count();
            assert!(split > 0, "the mixture splits some layer's q|k|v");
            // Counted on the barrier lowering (a GPU may run these layers persistent,
            // whose dispatches hold the whole layer).
            let mut cap = d.capture();
            loaded.model.encode_step_lowered(&mut cap, false).unwrap();
            let g = cap.finish_capture().unwrap();
            let normed = g
                .nodes()
                .iter()
                .filter(|n| n.pipeline.desc().name.starts_with("matvec_norm_"))
                .count();
            let two = g
                .nodes()
                .iter()
                .filter(|n| n.pipeline.desc().name.starts_with("matvec_norm_two_"))
                .count();
            let (want_normed, want_two) = if int_dot {
                (cfg.layers + 1, split)
            } else {
                (cfg.layers + split + 1, 0)
            };
            assert_eq!(normed, want_normed, "q|k|v and LM head dispatches");
            assert_eq!(two, want_two, "two-format q|k|v dispatches");
        }
        // Integer dots: every layer's gate/up hands down its output as int8 blocks where
        // its workgroups can own 32-row blocks: Q8_0, Q4_0, Q4_1 (on a 32 x 4 plan); not
        // the others, whose plan here has 16 rows per workgroup.
        let cheap = [WeightDtype::Q8_0, WeightDtype::Q4_0, WeightDtype::Q4_1];
        let handoffs = if int_dot && cheap.contains(&dt) && kind != QuantKind::Q4KM {
            cfg.layers
        } else {
            0
        };
        assert_eq!(loaded.model.q8_handoff_layers(), handoffs, "{}", dt.name());
        // The attention hands o its output as int8 blocks (head_dim 64) where o's format
        // and plan make that pay (Q8_0, Q4_0, Q4_1 here: o's Q4_K plan has one row per
        // thread group at this size).
        let (o_rows, o_cols) = (cfg.hidden, cfg.heads * cfg.head_dim);
        let o_name = "model.layers.0.self_attn.o_proj.weight";
        let o_dt = target_dtype(Some(&request), &cfg, o_name, o_rows, o_cols, dt);
        let pays = sluice_kernels::attn_q8_handoff_pays(o_dt, o_rows as u32, o_cols as u32);
        let attn_handoffs = if int_dot && pays { cfg.layers } else { 0 };
        attn_handoff_models += (attn_handoffs > 0) as usize;
        assert_eq!(
            loaded.model.attn_q8_handoff_layers(),
            attn_handoffs,
            "{}",
            dt.name()
        );
        // The same model without the handoffs, whose logits must keep every bit: the
        // records are what the consumers would have made of the floats themselves.
        o.gpu.q8_handoff = false;
        let plain = open_model(&d, &format!("synthetic:{name}"), &o, |_, _| {}).unwrap();
        assert_eq!(plain.model.attn_q8_handoff_layers(), 0);
        let plain_decoder =
            Decoder::new(&plain.model, Mode::Replay, GraphOptions::default()).unwrap();
        let decoder = Decoder::new(&loaded.model, Mode::Replay, GraphOptions::default()).unwrap();
        let (mut token, mut worst, mut agree) = (1u32, 0f32, 0);
        for pos in 0..32 {
            let want = cpu.forward(token).unwrap();
            let next = decoder.step(token, pos).unwrap();
            plain_decoder.step(token, pos).unwrap();
            let (got, off) = (
                loaded.model.logits().unwrap(),
                plain.model.logits().unwrap(),
            );
            assert!(
                got.iter()
                    .zip(&off)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{} (int dot {int_dot}): logits at position {pos} differ with the q8 handoffs",
                dt.name()
            );
            worst = worst.max(rel_err(&got, &want));
            let cpu_next = argmax(&want).unwrap();
            agree += (next == cpu_next) as usize;
            token = cpu_next;
        }
        eprintln!(
            "{name} {} (int dot {int_dot}): worst relative logit error {worst:.2e}, greedy {agree}/32",
            dt.name()
        );
        assert!(
            worst < max_err,
            "{} (int dot {int_dot}): worst relative logit error {worst}",
            dt.name()
        );
        assert!(
            agree >= min_agree,
            "{} (int dot {int_dot}): greedy agreed on {agree}/32",
            dt.name()
        );
        // Prefill (block formats decoded into matmul tiles): a 21-token prompt in chunks
        // of 16 and 5 against the reference run over the same tokens.
        let prompt: Vec<u32> = (0..21u32)
            .map(|i| (i * 37 + 3) % cfg.vocab as u32)
            .collect();
        decoder.prefill(&prompt, 0).unwrap();
        cpu.reset();
        let mut want = Vec::new();
        for &t in &prompt {
            want = cpu.forward(t).unwrap();
        }
        let err = rel_err(&loaded.model.logits().unwrap(), &want);
        assert!(
            err < max_err,
            "{} (int dot {int_dot}): prefill relative logit error {err}",
            dt.name()
        );
    }
    // Q8_0, Q4_0 and Q4_1 ran with the attention's handoff.
    assert_eq!(attn_handoff_models, if int_dot { 3 } else { 0 });
}

/// `bench_suite` fills the KV cache to its depth once for all its decode runs (the warm-up
/// and `repeat` timed ones), not once per run: in dispatches, the suite costs one `bench`
/// (one fill, one run) plus three runs, so suite - bench is the same at two depths whose
/// fills take different numbers of prefill chunks (once per run, it grew by three fills).
/// `bench_suite_with` reports each fill's progress, one fill per row.
#[test]
fn bench_fills_the_cache_once_per_row() {
    use sluice_llm::bench::{bench, bench_suite, bench_suite_with, BenchParams};
    let d = device(BarrierMode::Auto);
    let _guard = ValidationGuard::new(&d);
    let mut o = LoadOptions::default();
    o.gpu.context = 64;
    o.gpu.prefill_chunk = 4;
    o.gpu.lowering = Lowering::Barriers;
    let loaded = open_model(&d, "synthetic:tiny", &o, |_, _| {}).unwrap();
    let decoder = Decoder::new(&loaded.model, Mode::Replay, GraphOptions::default()).unwrap();
    let dispatches = |f: &dyn Fn()| {
        let before = d.counters();
        f();
        d.counters().since(&before).dispatches
    };
    let n = 3;
    let extra: Vec<u64> = [1usize, 14]
        .into_iter()
        .map(|depth| {
            let one = dispatches(&|| {
                bench(&decoder, "tiny", "f16", depth, n).unwrap();
            });
            let params = BenchParams {
                prompt: 0,
                n,
                depth,
                repeat: 2,
            };
            let suite = dispatches(&|| {
                let s = bench_suite(&decoder, "tiny", "f16", &params).unwrap();
                assert_eq!(s.rows[0].samples_ts.len(), 2);
            });
            assert!(suite > one, "depth {depth}: suite {suite}, one run {one}");
            suite - one
        })
        .collect();
    assert_eq!(
        extra[0], extra[1],
        "dispatches past one bench at depths 1 and 14"
    );
    // The fills as the suite reports them: one per row (pp, then tg), each from 0 to the
    // depth in chunks of 4.
    let params = BenchParams {
        prompt: 2,
        n,
        depth: 10,
        repeat: 2,
    };
    let mut fills = Vec::new();
    bench_suite_with(&decoder, "tiny", "f16", &params, &mut |done, total| {
        fills.push((done, total))
    })
    .unwrap();
    let one = [(0, 10), (4, 10), (8, 10), (10, 10)];
    assert_eq!(fills, [one, one].concat());
}
