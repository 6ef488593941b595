//! The real server on the tiny chat model (lavapipe in CI), driven by a real HTTP client,
//! over both engines: the single-sequence one (against direct greedy generation) and the
//! continuous-batching one (against each prompt decoded ALONE through the batched engine,
//! prompts mixed into decode steps — batch invariance: 8 concurrent streams must each
//! equal their solo result). Whole and
//! streamed responses, cancellation (KV blocks back, per /metrics), stop strings, seeded
//! sampling, bad requests, 401, and a clean shutdown with no validation message.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice::graph::GraphOptions;
use sluice_llm::batch::BatchRunner;
use sluice_llm::decode::{Decoder, Mode};
use sluice_llm::gpu::PagedOptions;
use sluice_llm::load::{open_model, LoadOptions};
use sluice_llm::run::{generate, GenerateOptions};
use sluice_llm::sampler::Sampling;
use sluice_llm::tokenizer::Tokenizer;
use sluice_serve::batch_engine::{BatchEngine, PromptSteps};
use sluice_serve::client::{request, stream, Events, Reply, Target};
use sluice_serve::engine::Engine;
use sluice_serve::run::{start_gpu, ModelSource};
use sluice_serve::scheduler::Limits;
use sluice_serve::server::{router, serve, ServerConfig};
use sluice_serve::testing::write_tiny_chat_model;

const CONTEXT: usize = 96;
const KEY: &str = "sk-test-key";
const AUTH: (&str, &str) = ("authorization", "Bearer sk-test-key");
/// End-of-generation ids of the tiny chat model (`<|im_end|>`, `<|endoftext|>`).
const EOG: [u32; 2] = [257, 258];

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn load_options() -> LoadOptions {
    let mut load = LoadOptions::default();
    load.gpu.context = CONTEXT;
    load
}

/// Prompt tokens per step of the batched engine: prompts take several steps, beside
/// decoding sequences.
const PROMPTS: PromptSteps = PromptSteps::Mixed { tokens: 4 };

/// The batched engine's limits: 8 slots of CONTEXT positions over a pool that cannot hold
/// all of them at full length (memory follows actual lengths); steps of up to 12 rows.
fn paged() -> PagedOptions {
    PagedOptions {
        max_rows: 12,
        sequences: 8,
        seq_context: CONTEXT,
        block: 16,
    }
}

/// Load options of the batched engine (`context` = the pool).
fn paged_load_options() -> LoadOptions {
    let mut load = LoadOptions::default();
    load.gpu.context = 4 * CONTEXT + 16;
    load.gpu.prefill_chunk = 16; // prompts of several chunks, interleaved with decode
    load.gpu.paged = Some(paged());
    load
}

/// Greedy tokens for a prompt, generated directly on the reference device.
type Generate = Box<dyn Fn(&[u32], usize) -> Vec<u32>>;

/// Direct greedy generation (no server): text up to the first end-of-generation token,
/// its token count and finish reason.
struct Reference {
    tok: Tokenizer,
    run: Generate,
}

impl Reference {
    /// `chat`: the prompt is a rendered chat (no BOS added).
    fn expect(&self, prompt: &str, n: usize, chat: bool) -> (String, usize, &'static str) {
        let ids = self.tok.encode(prompt, !chat, true).unwrap();
        let all = (self.run)(&ids, n);
        let end = all.iter().position(|t| EOG.contains(t));
        let kept = &all[..end.unwrap_or(all.len())];
        let finish = if end.is_some() { "stop" } else { "length" };
        (self.tok.decode(kept, true).unwrap(), kept.len(), finish)
    }
}

fn chatml(user: &str) -> String {
    format!("<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
}

async fn post(t: &Target, path: &str, body: Value, headers: &[(&str, &str)]) -> Reply {
    request(
        t,
        "POST",
        path,
        headers,
        Some(body.to_string().into_bytes()),
    )
    .await
    .unwrap()
}

async fn metric(t: &Target, name: &str) -> f64 {
    let r = request(t, "GET", "/metrics", &[AUTH], None).await.unwrap();
    assert_eq!(r.status, 200);
    let text = String::from_utf8(r.body.to_vec()).unwrap();
    text.lines()
        .find(|l| l.starts_with(&format!("sluice_{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} missing:\n{text}"))
}

/// Waits until no sequence runs and no KV slot is held.
async fn wait_idle(t: &Target) {
    let t0 = Instant::now();
    while metric(t, "running_sequences").await != 0.0
        || metric(t, "kv_slots_in_use").await != 0.0
        || metric(t, "kv_blocks_in_use").await != 0.0
    {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the slot was not freed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Reads a stream to its end: the content, the finish reason, the usage chunk and
/// whether `[DONE]` came last.
async fn drain(mut ev: Events, chat: bool) -> (String, String, Value) {
    assert_eq!(ev.status, 200);
    let mut text = String::new();
    let (mut finish, mut usage, mut done, mut first) = (String::new(), Value::Null, false, true);
    while let Some((data, _)) = ev.next().await.unwrap() {
        assert!(!done, "data after [DONE]: {data}");
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let v: Value = serde_json::from_str(&data).unwrap();
        assert!(v.get("error").is_none(), "{v}");
        let kind = if chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        assert_eq!(v["object"], kind, "{v}");
        if !v["usage"].is_null() {
            assert_eq!(v["choices"], json!([]));
            usage = v["usage"].clone();
            continue;
        }
        let c = &v["choices"][0];
        if chat && first {
            assert_eq!(c["delta"]["role"], "assistant");
        }
        first = false;
        let piece = if chat {
            &c["delta"]["content"]
        } else {
            &c["text"]
        };
        text.push_str(piece.as_str().unwrap_or(""));
        if let Some(f) = c["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    assert!(done, "stream ended without [DONE]");
    (text, finish, usage)
}

fn error_of(r: &Reply, status: u16) -> Value {
    assert_eq!(r.status, status, "{:?}", String::from_utf8_lossy(&r.body));
    assert!(r.content_type.starts_with("application/json"));
    let v = r.json().unwrap();
    let e = &v["error"];
    assert!(
        e["message"].is_string() && e["type"].is_string() && e["code"].is_string(),
        "{v}"
    );
    e.clone()
}

/// Greedy decode of `ids` alone through the server's batched engine: `n` tokens (fewer
/// at an EOG).
fn solo_batched(model: &sluice_llm::gpu::GpuModel, ids: &[u32], n: usize) -> Vec<u32> {
    let r = BatchRunner::new(model, Mode::Replay, GraphOptions::default()).unwrap();
    let mut engine = BatchEngine::new(r, PROMPTS);
    engine.add(0, ids.to_vec(), Sampling::default()).unwrap();
    let mut out = Vec::new();
    while out.len() < n && !out.last().is_some_and(|t| EOG.contains(t)) {
        for (_, t) in engine.step() {
            out.push(t.unwrap());
        }
    }
    engine.free(0);
    out
}

#[test]
fn single_sequence_server_end_to_end() {
    server_end_to_end(false);
}

#[test]
fn batched_server_end_to_end() {
    server_end_to_end(true);
}

fn server_end_to_end(batched: bool) {
    let dir = TempDir(std::env::temp_dir().join(format!(
        "sluice-serve-http-{}-{batched}",
        std::process::id()
    )));
    write_tiny_chat_model(&dir.0).unwrap();
    let spec = dir.0.to_string_lossy().into_owned();

    // The reference: the same model opened directly on its own device, each prompt alone.
    let ref_device = sluice::testing::test_device();
    let load = if batched {
        paged_load_options()
    } else {
        load_options()
    };
    let loaded = open_model(&ref_device, &spec, &load, |_, _| {}).unwrap();
    let tok = loaded.tokenizer.unwrap();
    let model = loaded.model;
    let run = move |ids: &[u32], n: usize| {
        if batched {
            return solo_batched(&model, ids, n);
        }
        let d = Decoder::new(&model, Mode::Replay, GraphOptions::default()).unwrap();
        generate(&d, None, ids, &GenerateOptions::new(n), |_, _| {})
            .unwrap()
            .tokens
    };
    let reference = Reference {
        tok,
        run: Box::new(run),
    };

    let gpu = start_gpu(
        ModelSource {
            spec: spec.clone(),
            device: sluice::Options::for_tests(),
            load,
            mode: Mode::Replay,
            graph: GraphOptions::default(),
            batch: batched.then(paged),
            prompts: PROMPTS,
            record_ahead: true,
        },
        Limits::default(),
    )
    .unwrap();
    assert_eq!(
        gpu.scheduler.info().max_running,
        if batched { 8 } else { 1 }
    );
    let cfg = ServerConfig {
        model_name: "tiny-chat".into(),
        api_key: Some(KEY.into()),
        body_limit: 64 << 10,
        ..ServerConfig::default()
    };
    let app = router(gpu.scheduler.clone(), gpu.codec.clone(), cfg);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, app, std::future::pending()));
        let t = Target::parse(&format!("http://{addr}")).unwrap();
        let want = if batched {
            // The pool less its reserved block.
            (
                8.0,
                (paged_load_options().gpu.context - paged().block) as f64,
            )
        } else {
            (1.0, CONTEXT as f64)
        };
        basics(&t, want).await;
        bad_requests(&t).await;
        whole_and_streamed(&t, &reference).await;
        concurrent_streams(&t, &reference).await;
        stop_and_sampling(&t, &reference).await;
        cancel_mid_stream(&t).await;
        // Every step the runs took was recorded before the server started: none later.
        let (ahead, _) = gpu.recorded_ahead;
        assert_eq!(ahead > 0, batched, "steps recorded ahead");
        assert_eq!(metric(&t, "recorded_steps").await, ahead as f64);
    });
    assert!(
        gpu.scheduler.shutdown(Duration::from_secs(10)),
        "engine did not stop"
    );
    let v = gpu.validation.lock().unwrap();
    assert!(v.is_empty(), "validation messages:\n{}", v.join("\n"));
    sluice::testing::assert_no_validation_messages(&ref_device);
}

/// `want`: (max running sequences, KV slots in all).
async fn basics(t: &Target, want: (f64, f64)) {
    let h = request(t, "GET", "/health", &[], None).await.unwrap();
    assert_eq!(
        (h.status, h.json().unwrap()["status"].clone()),
        (200, json!("ok"))
    );
    let m = request(t, "GET", "/v1/models", &[AUTH], None)
        .await
        .unwrap();
    let v = m.json().unwrap();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], "tiny-chat");
    assert_eq!(v["data"][0]["context_length"], CONTEXT);
    // Wrong and missing keys.
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let wrong = post(
        t,
        "/v1/chat/completions",
        body.clone(),
        &[("authorization", "Bearer nope")],
    )
    .await;
    assert_eq!(error_of(&wrong, 401)["type"], "authentication_error");
    let missing = post(t, "/v1/chat/completions", body, &[]).await;
    error_of(&missing, 401);
    let m = request(t, "GET", "/v1/models", &[], None).await.unwrap();
    error_of(&m, 401);
    assert_eq!(metric(t, "max_running_sequences").await, want.0);
    assert_eq!(metric(t, "kv_slots_total").await, want.1);
}

async fn bad_requests(t: &Target) {
    let steps = metric(t, "engine_steps_total").await;
    let raw = request(
        t,
        "POST",
        "/v1/chat/completions",
        &[AUTH],
        Some(b"{\"messages\": [".to_vec()),
    )
    .await
    .unwrap();
    assert_eq!(error_of(&raw, 400)["code"], "invalid_json");
    let no_messages = post(t, "/v1/chat/completions", json!({"max_tokens": 3}), &[AUTH]).await;
    let e = error_of(&no_messages, 400);
    assert!(e["message"].as_str().unwrap().contains("messages"), "{e}");
    let no_prompt = post(t, "/v1/completions", json!({"max_tokens": 3}), &[AUTH]).await;
    error_of(&no_prompt, 400);
    let negative = post(
        t,
        "/v1/completions",
        json!({"prompt": "Hi", "max_tokens": -1}),
        &[AUTH],
    )
    .await;
    assert_eq!(error_of(&negative, 400)["code"], "invalid_max_tokens");
    let long = "x".repeat(CONTEXT + 4);
    let too_long = post(
        t,
        "/v1/completions",
        json!({"prompt": long, "max_tokens": 1}),
        &[AUTH],
    )
    .await;
    assert_eq!(error_of(&too_long, 400)["code"], "context_length_exceeded");
    let no_room = post(
        t,
        "/v1/completions",
        json!({"prompt": "x".repeat(CONTEXT - 8), "max_tokens": 9}),
        &[AUTH],
    )
    .await;
    assert_eq!(error_of(&no_room, 400)["code"], "context_length_exceeded");
    let huge = post(
        t,
        "/v1/completions",
        json!({"prompt": "y".repeat(70 << 10)}),
        &[AUTH],
    )
    .await;
    assert_eq!(error_of(&huge, 400)["code"], "body_too_large");
    let vocab = post(
        t,
        "/v1/completions",
        json!({"prompt": [1, 999], "max_tokens": 2, "stream": true}),
        &[AUTH],
    )
    .await;
    // Checked before the request is queued, so also a streamed request gets a 400.
    error_of(&vocab, 400);
    let n2 = post(
        t,
        "/v1/completions",
        json!({"prompt": "a", "n": 2}),
        &[AUTH],
    )
    .await;
    error_of(&n2, 400);
    let nf = request(t, "GET", "/v2/nothing", &[AUTH], None)
        .await
        .unwrap();
    error_of(&nf, 404);
    // None of them reached the GPU.
    assert_eq!(metric(t, "engine_steps_total").await, steps);
}

async fn whole_and_streamed(t: &Target, r: &Reference) {
    // Text completion, whole.
    let (want, n, finish) = r.expect("Hello", 8, false);
    let res = post(
        t,
        "/v1/completions",
        json!({"prompt": "Hello", "max_tokens": 8, "temperature": 0}),
        &[AUTH],
    )
    .await;
    assert_eq!(res.status, 200);
    let v = res.json().unwrap();
    assert_eq!(v["object"], "text_completion");
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(v["model"], "tiny-chat");
    assert_eq!(v["choices"][0]["text"], want.as_str());
    assert_eq!(v["choices"][0]["finish_reason"], finish);
    assert_eq!(v["usage"]["prompt_tokens"], 5);
    assert_eq!(v["usage"]["completion_tokens"], n);
    assert_eq!(v["usage"]["total_tokens"], 5 + n);
    // Text completion, streamed.
    let body = json!({"prompt": "Hello", "max_tokens": 8, "temperature": 0, "stream": true,
                      "stream_options": {"include_usage": true}});
    let ev = stream(t, "/v1/completions", &[AUTH], body.to_string().into_bytes())
        .await
        .unwrap();
    let (text, f, usage) = drain(ev, false).await;
    assert_eq!((text.as_str(), f.as_str()), (want.as_str(), finish));
    assert_eq!(usage["completion_tokens"], n);
    // Chat, whole and streamed.
    let (want, n, finish) = r.expect(&chatml("What is sluice?"), 10, true);
    let body = json!({"model": "x", "messages": [{"role": "user", "content": "What is sluice?"}],
                      "max_tokens": 10, "temperature": 0});
    let res = post(t, "/v1/chat/completions", body.clone(), &[AUTH]).await;
    assert_eq!(res.status, 200);
    let v = res.json().unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], want.as_str());
    assert_eq!(v["choices"][0]["finish_reason"], finish);
    assert_eq!(v["usage"]["completion_tokens"], n);
    let mut sbody = body;
    sbody["stream"] = json!(true);
    let ev = stream(
        t,
        "/v1/chat/completions",
        &[AUTH],
        sbody.to_string().into_bytes(),
    )
    .await
    .unwrap();
    let (text, f, usage) = drain(ev, true).await;
    assert_eq!((text.as_str(), f.as_str()), (want.as_str(), finish));
    assert!(usage.is_null(), "usage chunk only when asked for");
}

async fn concurrent_streams(t: &Target, r: &Reference) {
    let prompts: Vec<String> = (0..8).map(|i| format!("Stream {i}: tell me")).collect();
    let wants: Vec<_> = prompts
        .iter()
        .map(|p| r.expect(&chatml(p), 6, true))
        .collect();
    let t0 = Instant::now();
    let tasks: Vec<_> = prompts
        .iter()
        .map(|p| {
            let (t, p) = (t.clone(), p.clone());
            tokio::spawn(async move {
                let body = json!({"messages": [{"role": "user", "content": p}], "max_tokens": 6,
                                  "temperature": 0, "stream": true});
                let ev = stream(
                    &t,
                    "/v1/chat/completions",
                    &[AUTH],
                    body.to_string().into_bytes(),
                )
                .await
                .unwrap();
                drain(ev, true).await
            })
        })
        .collect();
    for (task, (want, _, finish)) in tasks.into_iter().zip(&wants) {
        let (text, f, _) = task.await.unwrap();
        assert_eq!((text.as_str(), f.as_str()), (want.as_str(), *finish));
    }
    eprintln!("8 concurrent streams: {:.2} s", t0.elapsed().as_secs_f64());
    // The engine frees a sequence right after sending its last event.
    wait_idle(t).await;
    assert_eq!(metric(t, "queue_depth").await, 0.0);
}

async fn stop_and_sampling(t: &Target, r: &Reference) {
    // A stop string taken from the greedy output cuts it there.
    let (want, _, _) = r.expect("Stop here", 12, false);
    let chars: Vec<char> = want.chars().collect();
    if chars.len() >= 4 {
        let stop: String = chars[2..4].iter().collect();
        let cut = &want[..want.find(&stop).unwrap()];
        let res = post(
            t,
            "/v1/completions",
            json!({"prompt": "Stop here", "max_tokens": 12, "temperature": 0, "stop": [stop]}),
            &[AUTH],
        )
        .await;
        let v = res.json().unwrap();
        assert_eq!(v["choices"][0]["text"], cut);
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
    }
    // Seeded sampling repeats itself.
    let body = json!({"prompt": "Sample", "max_tokens": 8, "temperature": 0.9, "top_p": 0.95,
                      "top_k": 40, "seed": 7});
    let a = post(t, "/v1/completions", body.clone(), &[AUTH])
        .await
        .json()
        .unwrap();
    let b = post(t, "/v1/completions", body, &[AUTH])
        .await
        .json()
        .unwrap();
    assert!(a["choices"][0]["text"].is_string());
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
}

async fn cancel_mid_stream(t: &Target) {
    let before = metric(t, "generation_tokens_total").await;
    let cancelled = metric(t, "requests_cancelled_total").await;
    let body = json!({"prompt": "x", "max_tokens": 80, "temperature": 0, "stream": true});
    let mut ev = stream(t, "/v1/completions", &[AUTH], body.to_string().into_bytes())
        .await
        .unwrap();
    let mut events = 0;
    while events < 2 {
        let (data, _) = ev.next().await.unwrap().expect("stream ended early");
        assert_ne!(data, "[DONE]");
        events += 1;
    }
    // The running sequence holds KV blocks (80 tokens take far longer than this read).
    assert!(metric(t, "kv_blocks_in_use").await > 0.0);
    drop(ev);
    wait_idle(t).await;
    assert_eq!(metric(t, "requests_cancelled_total").await, cancelled + 1.0);
    let generated = metric(t, "generation_tokens_total").await - before;
    assert!(
        generated < 80.0,
        "{generated} tokens generated after the client left"
    );
    // The server goes on.
    let res = post(
        t,
        "/v1/completions",
        json!({"prompt": "ok", "max_tokens": 2}),
        &[AUTH],
    )
    .await;
    assert_eq!(res.status, 200);
}
