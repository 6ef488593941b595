//! Generation on the tiny synthetic model (lavapipe in CI, validation on): stops at an
//! end-of-generation token, at stop strings (never shown), at max_tokens and at a full KV
//! cache; streamed text equals the result's text; a prompt continued at a later position
//! gives what the whole prompt gives.

use sluice::graph::GraphOptions;
use sluice::testing::{coopmat_or_test_device, ValidationGuard};
use sluice::Device;
use sluice_llm::decode::{Decoder, Mode};
use sluice_llm::load::{open_model, LoadOptions, Loaded};
use sluice_llm::run::{generate, GenerateOptions, StopReason};
use sluice_llm::tokenizer::{GgufVocab, Tokenizer};

fn load(d: &Device, context: usize) -> Loaded {
    let mut o = LoadOptions::default();
    o.gpu.context = context;
    open_model(d, "synthetic:tiny", &o, |_, _| {}).unwrap()
}

/// 256 tokens (the tiny model's vocabulary) whose text is `t{id},`; `eos` ends generation.
fn tokenizer(eos: u32) -> Tokenizer {
    Tokenizer::from_gguf_vocab(GgufVocab {
        model: "gpt2".into(),
        pre: Some("gpt-2".into()),
        tokens: (0..256).map(|i| format!("t{i},")).collect(),
        eos: Some(eos),
        ..Default::default()
    })
    .unwrap()
}

const PROMPT: [u32; 3] = [1, 2, 3];

#[test]
fn generation_stops_where_asked() {
    let d = coopmat_or_test_device();
    let _guard = ValidationGuard::new(&d);
    let loaded = load(&d, 64);
    let dec = Decoder::new(&loaded.model, Mode::Replay, GraphOptions::default()).unwrap();

    // Reference run: 12 greedy tokens, nothing stops them.
    let all = generate(&dec, None, &PROMPT, &GenerateOptions::new(12), |_, _| {}).unwrap();
    assert_eq!(all.stop_reason, StopReason::Length);
    assert_eq!(all.tokens.len(), 12);
    assert_eq!(all.text, "");
    let g = all.tokens.clone();

    // EOS: the first token that did not come before ends it (and is not part of it).
    let k = (1..g.len()).find(|&k| !g[..k].contains(&g[k])).unwrap();
    let tok = tokenizer(g[k]);
    let mut streamed = String::new();
    let mut ids = Vec::new();
    let r = generate(
        &dec,
        Some(&tok),
        &PROMPT,
        &GenerateOptions::new(12),
        |t, s| {
            ids.extend(t);
            streamed.push_str(s);
        },
    )
    .unwrap();
    assert_eq!(r.stop_reason, StopReason::Eos);
    assert_eq!(r.tokens, &g[..k]);
    assert_eq!(ids, &g[..k]);
    let want: String = g[..k].iter().map(|i| format!("t{i},")).collect();
    assert_eq!(r.text, want);
    assert_eq!(streamed, want);

    // --ignore-eos runs through it.
    let opts = GenerateOptions {
        ignore_eos: true,
        ..GenerateOptions::new(12)
    };
    let r = generate(&dec, Some(&tok), &PROMPT, &opts, |_, _| {}).unwrap();
    assert_eq!((r.stop_reason, &r.tokens), (StopReason::Length, &g));

    // A stop string: the text of the 4th token (first occurrence in the full text).
    let full: String = g.iter().map(|i| format!("t{i},")).collect();
    let stop = format!("t{},", g[3]);
    let at = full.find(&stop).unwrap();
    let mut len = 0;
    let m = g
        .iter()
        .position(|i| {
            len += format!("t{i},").len();
            len >= at + stop.len()
        })
        .unwrap()
        + 1;
    let opts = GenerateOptions {
        ignore_eos: true,
        stop: vec!["no such text".into(), String::new(), stop.clone()],
        ..GenerateOptions::new(12)
    };
    // (EOS renders as nothing: use a tokenizer whose EOS is not generated here.)
    let unused = (0..256).find(|i| !g.contains(i)).unwrap();
    let tok = tokenizer(unused);
    let mut streamed = String::new();
    let r = generate(&dec, Some(&tok), &PROMPT, &opts, |_, s| {
        streamed.push_str(s)
    })
    .unwrap();
    assert_eq!(r.stop_reason, StopReason::Stop);
    assert_eq!(r.text, &full[..at]);
    assert_eq!(streamed, r.text, "the stop string was never shown");
    assert_eq!(r.tokens, &g[..m]);

    // A KV cache of 8 positions leaves room for 5 tokens after the 3-token prompt.
    let small = load(&d, 8);
    let dec8 = Decoder::new(&small.model, Mode::Replay, GraphOptions::default()).unwrap();
    let r = generate(&dec8, None, &PROMPT, &GenerateOptions::new(100), |_, _| {}).unwrap();
    assert_eq!((r.stop_reason, r.tokens.len()), (StopReason::Context, 5));
    assert_eq!(r.tokens, &g[..5]);
    let r = generate(&dec8, None, &PROMPT, &GenerateOptions::new(5), |_, _| {}).unwrap();
    assert_eq!(r.stop_reason, StopReason::Length);
    // A prompt that fills the cache is an error naming the sizes.
    let e = generate(&dec8, None, &[1; 8], &GenerateOptions::new(1), |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("8 tokens") && e.contains("context"), "{e}");
}

#[test]
fn continuing_at_a_later_position_equals_the_whole_prompt() {
    let d = coopmat_or_test_device();
    let _guard = ValidationGuard::new(&d);
    let loaded = load(&d, 64);
    let dec = Decoder::new(&loaded.model, Mode::Replay, GraphOptions::default()).unwrap();
    let first = [5, 6, 7, 8];
    let second = [9, 10];
    let whole: Vec<u32> = first.iter().chain(&second).copied().collect();
    let want = generate(&dec, None, &whole, &GenerateOptions::new(6), |_, _| {}).unwrap();
    // Prefill the first part (one token generated, not fed), then the second at position 4.
    generate(&dec, None, &first, &GenerateOptions::new(1), |_, _| {}).unwrap();
    let opts = GenerateOptions {
        start: first.len(),
        ..GenerateOptions::new(6)
    };
    let got = generate(&dec, None, &second, &opts, |_, _| {}).unwrap();
    assert_eq!(got.tokens, want.tokens);
}
