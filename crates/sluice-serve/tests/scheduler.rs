//! Scheduler behaviour through real HTTP with a deterministic CPU engine (no GPU): joining
//! at token boundaries, queue limits, failing and panicking sequences, timeouts.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice_llm::sampler::Sampling;
use sluice_serve::client::{request, stream, Reply, Target};
use sluice_serve::engine::{Engine, SeqId, StepResult};
use sluice_serve::metrics::Metrics;
use sluice_serve::scheduler::{Limits, Scheduler};
use sluice_serve::server::{router, serve, ServerConfig};
use sluice_serve::text::TextCodec;
use sluice_serve::ServeError;

/// Prompt ids that make the mock fail (or panic) at its third step.
const FAIL: u32 = 13;
const PANIC: u32 = 66;

struct Mock {
    max: usize,
    delay: Duration,
    seqs: Vec<(SeqId, Vec<u32>, usize)>,
    max_seen: Arc<AtomicUsize>,
}

fn expected(prompt: &[u32], n: usize) -> Vec<u32> {
    let sum: u32 = prompt.iter().sum();
    (0..n as u32).map(|g| (sum + 7 * g) % 200 + 1).collect()
}

impl Engine for Mock {
    fn max_sequences(&self) -> usize {
        self.max
    }
    fn context(&self) -> usize {
        4096
    }
    fn vocab(&self) -> usize {
        256
    }
    fn kv_slots_total(&self) -> usize {
        4096 * self.max
    }
    fn kv_slots_in_use(&self) -> usize {
        self.seqs.iter().map(|s| s.1.len() + s.2).sum()
    }
    fn add(&mut self, id: SeqId, prompt: Vec<u32>, _s: Sampling) -> Result<(), ServeError> {
        assert!(self.seqs.len() < self.max, "scheduler over-admitted");
        self.seqs.push((id, prompt, 0));
        Ok(())
    }
    fn step(&mut self) -> Vec<StepResult> {
        std::thread::sleep(self.delay);
        self.max_seen.fetch_max(self.seqs.len(), Relaxed);
        let mut out = Vec::new();
        for (id, prompt, g) in &mut self.seqs {
            if *g == 2 && prompt.contains(&PANIC) {
                panic!("injected engine panic");
            }
            if *g == 2 && prompt.contains(&FAIL) {
                out.push((*id, Err(ServeError::Model("injected failure".into()))));
                continue;
            }
            out.push((*id, Ok(expected(prompt, *g + 1)[*g])));
            *g += 1;
        }
        out
    }
    fn free(&mut self, id: SeqId) {
        self.seqs.retain(|s| s.0 != id);
    }
    fn running(&self) -> usize {
        self.seqs.len()
    }
}

struct Server {
    target: Target,
    max_seen: Arc<AtomicUsize>,
    sched: Scheduler,
}

async fn start(max: usize, limits: Limits, delay: Duration, timeout: Duration) -> Server {
    let max_seen = Arc::new(AtomicUsize::new(0));
    let seen = max_seen.clone();
    let sched = Scheduler::start(limits, Arc::new(Metrics::default()), move |serve_with| {
        let mut m = Mock {
            max,
            delay,
            seqs: Vec::new(),
            max_seen: seen,
        };
        serve_with(&mut m);
        Ok(())
    })
    .unwrap();
    let cfg = ServerConfig {
        request_timeout: timeout,
        ..ServerConfig::default()
    };
    let app = router(
        sched.clone(),
        Arc::new(TextCodec::new(None, None).unwrap()),
        cfg,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, app, std::future::pending()));
    Server {
        target: Target::parse(&format!("http://{addr}")).unwrap(),
        max_seen,
        sched,
    }
}

fn ids_of(text: &str) -> Vec<u32> {
    text.split('>')
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_start_matches('<').parse().unwrap())
        .collect()
}

async fn complete(s: &Server, prompt: &[u32], max_tokens: usize) -> Reply {
    let body = json!({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0});
    request(
        &s.target,
        "POST",
        "/v1/completions",
        &[],
        Some(body.to_string().into_bytes()),
    )
    .await
    .unwrap()
}

async fn metric(s: &Server, name: &str) -> f64 {
    let r = request(&s.target, "GET", "/metrics", &[], None)
        .await
        .unwrap();
    let text = String::from_utf8(r.body.to_vec()).unwrap();
    text.lines()
        .find(|l| l.starts_with(&format!("sluice_{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} missing:\n{text}"))
}

async fn wait_metric(s: &Server, name: &str, want: f64) {
    let t = Instant::now();
    while metric(s, name).await != want {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{name} never became {want}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn error_of(r: &Reply) -> Value {
    let v = r.json().unwrap();
    assert!(
        v["error"]["message"].is_string() && v["error"]["type"].is_string(),
        "{v}"
    );
    v["error"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_join_running_sequences_at_token_boundaries() {
    let s = start(
        4,
        Limits::default(),
        Duration::from_millis(3),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(metric(&s, "max_running_sequences").await, 4.0);
    let outside = complete(&s, &[1, 256], 3).await;
    assert_eq!(outside.status, 400);
    assert!(error_of(&outside)["message"]
        .as_str()
        .unwrap()
        .contains("vocabulary"));
    let body = json!({"prompt": [1, 2], "max_tokens": 200, "temperature": 0, "stream": true});
    let mut a = stream(
        &s.target,
        "/v1/completions",
        &[],
        body.to_string().into_bytes(),
    )
    .await
    .unwrap();
    let mut a_text = String::new();
    // A is running: read a few of its tokens, then B arrives and must join.
    while ids_of(&a_text).len() < 3 {
        let (data, _) = a.next().await.unwrap().unwrap();
        let v: Value = serde_json::from_str(&data).unwrap();
        a_text.push_str(v["choices"][0]["text"].as_str().unwrap());
    }
    let b = complete(&s, &[5], 10).await;
    assert_eq!(b.status, 200);
    let bv = b.json().unwrap();
    assert_eq!(
        ids_of(bv["choices"][0]["text"].as_str().unwrap()),
        expected(&[5], 10)
    );
    assert_eq!(bv["usage"]["completion_tokens"], 10);
    assert_eq!(bv["choices"][0]["finish_reason"], "length");
    // B finished while A was still streaming: they ran in the same steps.
    assert!(s.max_seen.load(Relaxed) >= 2);
    let mut finish = Value::Null;
    while let Some((data, _)) = a.next().await.unwrap() {
        if data == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(&data).unwrap();
        a_text.push_str(v["choices"][0]["text"].as_str().unwrap());
        finish = v["choices"][0]["finish_reason"].clone();
    }
    assert_eq!(ids_of(&a_text), expected(&[1, 2], 200));
    assert_eq!(finish, "length");
    wait_metric(&s, "running_sequences", 0.0).await;
    assert_eq!(metric(&s, "generation_tokens_total").await, 210.0);
    assert_eq!(metric(&s, "prompt_tokens_total").await, 3.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_429_and_frees_up() {
    let limits = Limits {
        max_queue: 1,
        max_running: 1,
    };
    let s = start(4, limits, Duration::from_millis(5), Duration::from_secs(30)).await;
    assert_eq!(metric(&s, "max_running_sequences").await, 1.0);
    let body = json!({"prompt": [1], "max_tokens": 1000, "stream": true, "temperature": 0});
    let mut a = stream(
        &s.target,
        "/v1/completions",
        &[],
        body.to_string().into_bytes(),
    )
    .await
    .unwrap();
    let (first, _) = a.next().await.unwrap().unwrap();
    assert!(first.contains("text_completion"), "{first}");
    let target = s.target.clone();
    let b = tokio::spawn(async move {
        let body = json!({"prompt": [2], "max_tokens": 3, "temperature": 0});
        request(
            &target,
            "POST",
            "/v1/completions",
            &[],
            Some(body.to_string().into_bytes()),
        )
        .await
        .unwrap()
    });
    wait_metric(&s, "queue_depth", 1.0).await;
    let c = complete(&s, &[3], 3).await;
    assert_eq!(c.status, 429);
    assert_eq!(error_of(&c)["type"], "rate_limit_error");
    assert_eq!(metric(&s, "requests_rejected_total").await, 1.0);
    // Hanging up on A frees its slot; B then runs.
    drop(a);
    let b = b.await.unwrap();
    assert_eq!(b.status, 200);
    let bv = b.json().unwrap();
    assert_eq!(
        ids_of(bv["choices"][0]["text"].as_str().unwrap()),
        expected(&[2], 3)
    );
    wait_metric(&s, "running_sequences", 0.0).await;
    assert_eq!(metric(&s, "requests_cancelled_total").await, 1.0);
    assert!(metric(&s, "generation_tokens_total").await < 900.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_sequence_leaves_the_others_running() {
    let s = start(
        2,
        Limits::default(),
        Duration::from_millis(2),
        Duration::from_secs(30),
    )
    .await;
    let (bad, good) = tokio::join!(complete(&s, &[FAIL], 8), complete(&s, &[3, 4], 8));
    assert_eq!(bad.status, 500);
    assert_eq!(error_of(&bad)["type"], "server_error");
    assert_eq!(good.status, 200);
    let v = good.json().unwrap();
    assert_eq!(
        ids_of(v["choices"][0]["text"].as_str().unwrap()),
        expected(&[3, 4], 8)
    );
    // A panic inside the engine fails the sequences of that step, not the server.
    let p = complete(&s, &[PANIC], 8).await;
    assert_eq!(p.status, 500);
    let after = complete(&s, &[9], 4).await;
    assert_eq!(after.status, 200);
    let h = request(&s.target, "GET", "/health", &[], None)
        .await
        .unwrap();
    assert_eq!(h.status, 200);
    wait_metric(&s, "running_sequences", 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_deadline_times_out() {
    let s = start(
        1,
        Limits::default(),
        Duration::from_millis(10),
        Duration::from_millis(150),
    )
    .await;
    let r = complete(&s, &[1], 200).await;
    assert_eq!(r.status, 504);
    assert_eq!(error_of(&r)["code"], "timeout");
    wait_metric(&s, "running_sequences", 0.0).await;
    assert_eq!(metric(&s, "requests_timed_out_total").await, 1.0);
    // Shutting down with nothing running finishes cleanly.
    assert!(s.sched.shutdown(Duration::from_secs(2)));
    let r = complete(&s, &[1], 2).await;
    assert_eq!(r.status, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_refuses_queued_work_and_cancels_running_work_after_the_grace() {
    let limits = Limits {
        max_queue: 4,
        max_running: 1,
    };
    let s = start(1, limits, Duration::from_millis(5), Duration::from_secs(30)).await;
    let body = json!({"prompt": [1], "max_tokens": 2000, "stream": true, "temperature": 0});
    let mut a = stream(
        &s.target,
        "/v1/completions",
        &[],
        body.to_string().into_bytes(),
    )
    .await
    .unwrap();
    a.next().await.unwrap().unwrap();
    let target = s.target.clone();
    let queued = tokio::spawn(async move {
        let body = json!({"prompt": [2], "max_tokens": 3});
        request(
            &target,
            "POST",
            "/v1/completions",
            &[],
            Some(body.to_string().into_bytes()),
        )
        .await
        .unwrap()
    });
    wait_metric(&s, "queue_depth", 1.0).await;
    let sched = s.sched.clone();
    let clean = tokio::task::spawn_blocking(move || sched.shutdown(Duration::from_millis(100)))
        .await
        .unwrap();
    assert!(
        !clean,
        "a 2000-token sequence cannot finish within the grace period"
    );
    // The queued request was refused, the running stream ends with an error event.
    let q = queued.await.unwrap();
    assert_eq!(q.status, 503);
    assert_eq!(error_of(&q)["type"], "service_unavailable");
    let mut error = Value::Null;
    while let Some((data, _)) = a.next().await.unwrap() {
        if data == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(&data).unwrap();
        if v.get("error").is_some() {
            error = v["error"].clone();
        }
    }
    assert_eq!(error["type"], "service_unavailable", "{error}");
    let h = request(&s.target, "GET", "/health", &[], None)
        .await
        .unwrap();
    assert_eq!(h.status, 503);
}
