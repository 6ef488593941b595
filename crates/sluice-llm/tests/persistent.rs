//! The persistent lowering (one dispatch per decoder layer, grid barriers inside) on
//! whatever Vulkan device exists, validation on: logits vs the f32 CPU reference, replay ==
//! direct bit for bit, the refusals (too many workgroups, formats and options its kernel
//! does not implement) and `Lowering::Auto`'s switch to barriers by position. On lavapipe
//! the residency bound is 1 workgroup, so the grid barriers pass at once; the stall path is
//! tested on the kernel (sluice-kernels tests).

use sluice::graph::GraphOptions;
use sluice::testing::{coopmat_or_test_device, ValidationGuard};
use sluice::Device;
use sluice_llm::config::ModelConfig;
use sluice_llm::decode::{Decoder, Mode};
use sluice_llm::gpu::Lowering;
use sluice_llm::load::{open_model, LoadOptions, Loaded};
use sluice_llm::reference::CpuModel;
use sluice_llm::safetensors::DType;
use sluice_llm::sampler::argmax;
use sluice_llm::weights::DEFAULT_SEED;
use sluice_llm::LlmError;

mod common;

fn options(lowering: Lowering) -> LoadOptions {
    let mut o = LoadOptions::default();
    o.gpu.context = 128;
    o.gpu.attention_chunk = 16; // several splits, so the combine path runs too
    o.gpu.lowering = lowering;
    o
}

fn load(d: &Device, name: &str, o: &LoadOptions) -> Result<Loaded, LlmError> {
    open_model(d, &format!("synthetic:{name}"), o, |_, _| {})
}

/// Max |a - b| relative to max |b|.
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// Teacher-forced decode of `steps` positions from token 1 against the CPU reference: the
/// worst relative logit error and the steps whose greedy token agreed. With
/// `dispatches`, each step must record exactly that many (`what` names the model).
fn against_reference(
    d: &Device,
    loaded: &Loaded,
    cpu: &mut CpuModel,
    steps: usize,
    dispatches: Option<u64>,
    what: &str,
) -> (f32, usize) {
    let decoder = Decoder::new(&loaded.model, Mode::Replay, GraphOptions::default()).unwrap();
    let (mut token, mut worst, mut agree) = (1u32, 0f32, 0);
    for pos in 0..steps {
        let before = d.counters();
        let next = decoder.step(token, pos).unwrap();
        if let Some(want) = dispatches {
            assert_eq!(
                d.counters().since(&before).dispatches,
                want,
                "{what}: step at {pos}"
            );
        }
        let want = cpu.forward(token).unwrap();
        worst = worst.max(rel_err(&loaded.model.logits().unwrap(), &want));
        let cpu_next = argmax(&want).unwrap();
        agree += (next == cpu_next) as usize;
        token = cpu_next;
    }
    (worst, agree)
}

#[test]
fn persistent_lowering_matches_cpu_reference() {
    let d = coopmat_or_test_device();
    let _guard = ValidationGuard::new(&d);
    for name in ["tiny", "tiny-llama", "tiny-qwen2", "tiny-llama3"] {
        let loaded = load(&d, name, &options(Lowering::Persistent)).unwrap();
        assert_eq!(loaded.model.lowering(), Lowering::Persistent);
        let info = loaded.model.persistent_info().unwrap();
        assert!(
            info.groups >= 1 && info.groups <= info.residency,
            "{info:?}"
        );
        let cfg = ModelConfig::synthetic(name).unwrap();
        let mut cpu = CpuModel::synthetic(&cfg, DEFAULT_SEED, DType::F16).unwrap();
        // 20 positions: splits of 16 positions, so the last steps merge two partials.
        let (worst, agree) = against_reference(&d, &loaded, &mut cpu, 20, None, name);
        eprintln!(
            "{name} persistent: worst relative logit error {worst:.2e}, agreement {agree}/20"
        );
        assert!(worst < 2e-3, "{name}: worst relative logit error {worst}");
        assert!(agree >= 19, "{name}: greedy agreed on {agree}/20 steps");
    }
}

/// The persistent layer where the attention's splits hold 64+ positions, which doubles the
/// idle workgroups' L2 warm-up (include/persistent_layer_body.wgsl, `warm_rest`): a
/// 320-position cache at the default chunk (256) has at most two splits, so from position
/// 65 on they hold 64+; still the CPU reference's logits, teacher-forced over 300
/// positions. The warm-up runs where the grid has more workgroups than attention items (a
/// GPU; lavapipe runs one workgroup, so there it checks the longer splits only).
#[test]
fn persistent_lowering_matches_cpu_reference_with_long_splits() {
    let d = coopmat_or_test_device();
    let _guard = ValidationGuard::new(&d);
    let mut o = LoadOptions::default();
    o.gpu.context = 320;
    o.gpu.lowering = Lowering::Persistent;
    let loaded = load(&d, "tiny", &o).unwrap();
    assert_eq!(loaded.model.lowering(), Lowering::Persistent);
    let cfg = ModelConfig::synthetic("tiny").unwrap();
    let mut cpu = CpuModel::synthetic(&cfg, DEFAULT_SEED, DType::F16).unwrap();
    let (worst, agree) = against_reference(&d, &loaded, &mut cpu, 300, None, "tiny");
    eprintln!("tiny persistent, 300 positions: worst relative logit error {worst:.2e}");
    eprintln!("tiny persistent, 300 positions: greedy agreement {agree}/300");
    assert!(worst < 2e-3, "worst relative logit error {worst}");
    assert!(agree >= 295, "greedy agreed on {agree}/300 steps");
}

/// Every block format: the persistent kernel (units decoded in registers against the
/// staged float input) against the CPU reference run on the same quantized-then-dequantized
/// weights, teacher-forced over two attention splits, one dispatch per layer; and the
/// Q4_K_M and Q5_K_M mixtures, whose layer 1 has Q6_K v and down (llama.cpp's mixture) and
/// runs the two-format kernel (`persistent_layer_mix`): also one dispatch. Integer dot
/// products off, so no matvec quantizes its input (the LM head's would) and the bound is
/// the float one. Validated on lavapipe (one workgroup); on a GPU with matrix units without
/// the layer, which predates them (`sluice::testing`), so the grid barriers of many
/// workgroups are checked there too.
#[test]
fn persistent_block_formats_match_cpu_reference() {
    use sluice_llm::quant_mix::{QuantKind, QuantRequest};
    let d = sluice::testing::coopmat_or_test_device_with(sluice::Options {
        no_int_dot: true,
        ..sluice::Options::default()
    });
    let _guard = ValidationGuard::new(&d);
    let name = "tiny-256";
    let cfg = ModelConfig::synthetic(name).unwrap();
    let layers = cfg.layers as u64;
    let kinds = sluice_kernels::quant::QUANT_DTYPES
        .map(QuantKind::Uniform)
        .into_iter()
        .chain([QuantKind::Q4KM, QuantKind::Q5KM]);
    for kind in kinds {
        let request = QuantRequest {
            kind,
            tied_embeddings: cfg.tied_embeddings,
            tensor_types: Default::default(),
        };
        let mut o = options(Lowering::Persistent);
        o.gpu.context = 32;
        o.gpu.attention_chunk = 8;
        o.dtype = Some(request);
        let loaded = load(&d, name, &o).unwrap();
        let info = loaded.model.persistent_info().unwrap();
        // Dispatches per step: one per layer, plus embed, LM head and argmax (which also
        // advances the position);
        // one kernel for every layer (the mixtures' layer 0 in Q4_K / Q5_K alone runs the
        // two-format kernel too).
        assert_eq!(info.layers as u64, layers, "{kind:?}");
        assert_eq!(info.kernels, 1, "{kind:?}");
        let mut cpu = common::quantized_reference(&cfg, &request);
        let steps = 12;
        let what = format!("{kind:?}");
        let (worst, agree) =
            against_reference(&d, &loaded, &mut cpu, steps, Some(layers + 3), &what);
        eprintln!(
            "{name} {kind:?} persistent: worst relative logit error {worst:.2e}, greedy {agree}/{steps}"
        );
        assert!(worst < 2e-3, "{kind:?}: worst relative logit error {worst}");
        assert!(
            agree >= steps - 1,
            "{kind:?}: greedy agreed on {agree}/{steps}"
        );
    }
    // `tiny` (hidden 64, one workgroup): rows of two 32-weight units over two or four
    // lanes, so some lanes hold one unit (the matvec op's odd last unit, after the pairs).
    let cfg = ModelConfig::synthetic("tiny").unwrap();
    for dtype in [
        sluice_kernels::WeightDtype::Q8_0,
        sluice_kernels::WeightDtype::Q4_0,
    ] {
        let request = QuantRequest {
            kind: QuantKind::Uniform(dtype),
            tied_embeddings: cfg.tied_embeddings,
            tensor_types: Default::default(),
        };
        let mut o = options(Lowering::Persistent);
        o.dtype = Some(request);
        let loaded = load(&d, "tiny", &o).unwrap();
        assert_eq!(loaded.model.persistent_info().unwrap().kernels, 1);
        let mut cpu = common::quantized_reference(&cfg, &request);
        let what = format!("tiny {dtype:?}");
        let (worst, agree) = against_reference(&d, &loaded, &mut cpu, 12, None, &what);
        eprintln!("{what} persistent: worst relative logit error {worst:.2e}, greedy {agree}/12");
        assert!(worst < 2e-3, "{what}: worst relative logit error {worst}");
        assert!(agree >= 11, "{what}: greedy agreed on {agree}/12");
    }
}

#[test]
fn persistent_replay_equals_direct() {
    let d = coopmat_or_test_device();
    let _guard = ValidationGuard::new(&d);
    let run = |mode| {
        let loaded = load(&d, "tiny", &options(Lowering::Persistent)).unwrap();
        let decoder = Decoder::new(&loaded.model, mode, GraphOptions::default()).unwrap();
        let tokens = decoder.run_greedy(3, 0, 12).unwrap();
        let bits: Vec<u32> = loaded
            .model
            .logits()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        (tokens, bits)
    };
    assert_eq!(run(Mode::Direct), run(Mode::Replay));
}

#[test]
fn persistent_lowering_refuses_what_it_cannot_run() {
    let d = coopmat_or_test_device();
    let residency = sluice_kernels::persistent_residency(d.info().compute_units);
    let err = |o: &LoadOptions| match load(&d, "tiny", o) {
        Ok(_) => panic!("loaded, expected a refusal"),
        Err(e) => e.to_string(),
    };
    // More workgroups than can be resident at once: refused with the bound.
    let mut o = options(Lowering::Persistent);
    o.gpu.persistent_groups = Some(residency + 1);
    let e = err(&o);
    assert!(e.contains(&format!("holds at most {residency}")), "{e}");
    // bf16 weights: no persistent kernel reads them.
    let mut o = options(Lowering::Persistent);
    o.dtype = Some(sluice_llm::quant_mix::parse("bf16").unwrap());
    let e = err(&o);
    assert!(e.contains("layer 0 is bf16"), "{e}");
    // The unfused layer is not the program the kernel implements.
    let mut o = options(Lowering::Persistent);
    o.gpu.fuse_norm = false;
    let e = err(&o);
    assert!(e.contains("--no-fuse"), "{e}");
    // Exactly the bound is fine.
    let mut o = options(Lowering::Persistent);
    o.gpu.persistent_groups = Some(residency);
    assert!(load(&d, "tiny", &o).is_ok());
}

#[test]
fn auto_lowering_switches_to_barriers_when_attention_needs_more_rounds() {
    let d = coopmat_or_test_device();
    let _guard = ValidationGuard::new(&d);
    for mode in [Mode::Replay, Mode::Direct] {
        // One workgroup (lavapipe's bound, asked for explicitly so Auto may use it): the
        // four heads' attention is four rounds at positions 0..16 (one split of 16) and
        // eight from 16 on, so Auto runs persistent steps first, then barrier steps.
        let mut o = options(Lowering::Auto);
        o.gpu.persistent_groups = Some(1);
        let loaded = load(&d, "tiny", &o).unwrap();
        let m = &loaded.model;
        let layers = m.config().layers as u64;
        assert!(
            m.persistent_info().is_some(),
            "auto chose the persistent lowering"
        );
        assert!(m.persistent_at(15) && !m.persistent_at(16));
        let decoder = Decoder::new(m, mode, GraphOptions::default()).unwrap();
        let cfg = ModelConfig::synthetic("tiny").unwrap();
        let mut cpu = CpuModel::synthetic(&cfg, DEFAULT_SEED, DType::F16).unwrap();
        let (mut token, mut worst) = (1u32, 0f32);
        for pos in 0..24 {
            let before = d.counters();
            let next = decoder.step(token, pos).unwrap();
            let dispatches = d.counters().since(&before).dispatches;
            // Persistent: one dispatch per layer; barriers: five (fused); plus embed, LM
            // head and the argmax (which also advances the position; the tiny head has no
            // resident grid to take it).
            let want = if pos < 16 { layers + 3 } else { 5 * layers + 3 };
            assert_eq!(dispatches, want, "{mode:?} step at {pos}");
            let logits = cpu.forward(token).unwrap();
            worst = worst.max(rel_err(&m.logits().unwrap(), &logits));
            assert_eq!(next, argmax(&logits).unwrap(), "{mode:?} greedy at {pos}");
            token = next;
        }
        assert!(worst < 2e-3, "{mode:?}: worst relative logit error {worst}");
    }
    // Auto's formats: those measured faster as one dispatch per layer (Q8_0, the Q4_K_M
    // mixture on its two-format kernel); not Q6_K nor the Q5_K_M mixture.
    for (dtype, persistent) in [
        ("q8_0", true),
        ("q6_k", false),
        ("q4_k_m", true),
        ("q5_k_m", false),
    ] {
        let mut o = options(Lowering::Auto);
        o.gpu.persistent_groups = Some(1);
        o.dtype = Some(sluice_llm::quant_mix::parse(dtype).unwrap());
        let loaded = load(&d, "tiny-256", &o).unwrap();
        assert_eq!(
            loaded.model.persistent_info().is_some(),
            persistent,
            "auto with {dtype}"
        );
    }
    // Where the device does not report its multiprocessors and no count is asked for,
    // Auto keeps to barriers (lavapipe, other vendors).
    if d.info().compute_units == 0 {
        let loaded = load(&d, "tiny", &options(Lowering::Auto)).unwrap();
        assert!(loaded.model.persistent_info().is_none());
        assert!(!loaded.model.persistent_at(0));
    }
}

#[test]
fn lowering_names_parse() {
    assert_eq!("barriers".parse::<Lowering>().unwrap(), Lowering::Barriers);
    assert_eq!(
        "persistent".parse::<Lowering>().unwrap(),
        Lowering::Persistent
    );
    assert_eq!("auto".parse::<Lowering>().unwrap(), Lowering::Auto);
    assert!("megakernel".parse::<Lowering>().is_err());
    assert_eq!(Lowering::default(), Lowering::Auto);
}
