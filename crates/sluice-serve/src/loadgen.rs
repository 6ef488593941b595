//! `sluice loadgen`: concurrent streamed completions against an OpenAI-compatible server,
//! reporting aggregate tokens per second, time to first token and inter-token latency.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use crate::client::{stream, Target};
use crate::error::{Result, ServeError};

/// What to send.
#[derive(Clone, Debug)]
pub struct LoadgenConfig {
    /// Base URL `http://HOST:PORT`.
    pub url: String,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Requests in all.
    pub requests: usize,
    /// `max_tokens` of each request.
    pub max_tokens: usize,
    /// Prompt text (request `i` gets ` #i` appended so prompts differ).
    pub prompt: String,
    /// Use `/v1/chat/completions` instead of `/v1/completions`.
    pub chat: bool,
    /// Send prompts of this many token ids (below 256, different per request) instead of
    /// text: for models without a tokenizer (`synthetic:NAME`).
    pub prompt_ids: Option<usize>,
    /// Bearer token.
    pub api_key: Option<String>,
    /// Give up on one request after this long.
    pub timeout: Duration,
}

/// Percentiles of a latency set, in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// The largest (a one-off stall shows here before it moves a percentile).
    pub max_ms: f64,
    /// Mean.
    pub mean_ms: f64,
    /// Samples.
    pub n: usize,
}

impl Latency {
    fn of(mut v: Vec<f64>) -> Latency {
        if v.is_empty() {
            return Latency::default();
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize] * 1e3;
        Latency {
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            max_ms: at(1.0),
            mean_ms: v.iter().sum::<f64>() / v.len() as f64 * 1e3,
            n: v.len(),
        }
    }
}

/// The load generator's figures.
#[derive(Clone, Debug, Serialize)]
pub struct LoadgenReport {
    /// Requests that completed.
    pub ok: usize,
    /// Requests that failed (status, error event, timeout).
    pub failed: usize,
    /// First failure message, if any.
    pub first_error: Option<String>,
    /// Completion tokens (from `usage`; without it, the streamed events that carried text).
    pub completion_tokens: u64,
    /// Wall time of the whole run in seconds.
    pub wall_s: f64,
    /// Completion tokens per wall second over all requests.
    pub aggregate_tok_s: f64,
    /// Time from sending a request to its first content event.
    pub ttft: Latency,
    /// Gaps between successive content events of a request.
    pub itl: Latency,
}

struct One {
    tokens: u64,
    ttft: Option<f64>,
    gaps: Vec<f64>,
}

async fn one(target: &Target, cfg: &LoadgenConfig, i: usize) -> Result<One> {
    let prompt = format!("{} #{i}", cfg.prompt);
    let mut body = json!({
        "model": "sluice",
        "max_tokens": cfg.max_tokens,
        "temperature": 0,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let path = if cfg.chat {
        body["messages"] = json!([{"role": "user", "content": prompt}]);
        "/v1/chat/completions"
    } else {
        body["prompt"] = match cfg.prompt_ids {
            Some(n) => json!((0..n)
                .map(|k| ((k * 7919 + i * 101 + 1) % 256) as u32)
                .collect::<Vec<u32>>()),
            None => json!(prompt),
        };
        "/v1/completions"
    };
    let auth = cfg.api_key.as_ref().map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    let t0 = Instant::now();
    let mut ev = stream(target, path, &headers, body.to_string().into_bytes()).await?;
    let mut out = One {
        tokens: 0,
        ttft: None,
        gaps: Vec::new(),
    };
    let mut last: Option<Instant> = None;
    let mut pieces = 0u64;
    while let Some((data, at)) = ev.next().await? {
        if data == "[DONE]" {
            break;
        }
        let v: serde_json::Value = serde_json::from_str(&data)
            .map_err(|e| ServeError::Http(format!("bad event {data:?}: {e}")))?;
        if ev.status != 200 || v.get("error").is_some() {
            return Err(ServeError::Http(format!("status {}: {data}", ev.status)));
        }
        if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
            out.tokens = n;
        }
        let c = &v["choices"][0];
        let piece = c["delta"]["content"]
            .as_str()
            .or(c["text"].as_str())
            .unwrap_or("");
        if piece.is_empty() {
            continue;
        }
        pieces += 1;
        match last {
            None => out.ttft = Some((at - t0).as_secs_f64()),
            Some(l) => out.gaps.push((at - l).as_secs_f64()),
        }
        last = Some(at);
    }
    // A server that sends no usage in its stream: count the events that carried text.
    if out.tokens == 0 {
        out.tokens = pieces;
    }
    Ok(out)
}

/// Runs the load and reports.
pub async fn run(cfg: LoadgenConfig) -> Result<LoadgenReport> {
    let target = Target::parse(&cfg.url)?;
    let cfg = Arc::new(cfg);
    let next = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..cfg.concurrency.max(1) {
        let (cfg, next, target) = (cfg.clone(), next.clone(), target.clone());
        tasks.push(tokio::spawn(async move {
            let mut results = Vec::new();
            loop {
                let i = next.fetch_add(1, Relaxed);
                if i >= cfg.requests {
                    break;
                }
                let r = tokio::time::timeout(cfg.timeout, one(&target, &cfg, i))
                    .await
                    .unwrap_or_else(|_| Err(ServeError::Timeout(cfg.timeout)));
                results.push(r);
            }
            results
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(
            t.await
                .map_err(|e| ServeError::Http(format!("worker failed: {e}")))?,
        );
    }
    let wall = t0.elapsed().as_secs_f64();
    let (mut ok, mut failed, mut first_error, mut tokens) = (0, 0, None, 0);
    let (mut ttft, mut itl) = (Vec::new(), Vec::new());
    for r in all {
        match r {
            Ok(o) => {
                ok += 1;
                tokens += o.tokens;
                ttft.extend(o.ttft);
                itl.extend(o.gaps);
            }
            Err(e) => {
                failed += 1;
                first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    Ok(LoadgenReport {
        ok,
        failed,
        first_error,
        completion_tokens: tokens,
        wall_s: wall,
        aggregate_tok_s: tokens as f64 / wall.max(1e-9),
        ttft: Latency::of(ttft),
        itl: Latency::of(itl),
    })
}

/// [`run`] on a runtime of its own (for callers without one).
pub fn run_blocking(cfg: LoadgenConfig) -> Result<LoadgenReport> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| ServeError::io("start the async runtime", e))?
        .block_on(run(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;

    /// A server whose streams carry `pieces` text events and no `usage` (OpenAI servers send
    /// it only when asked, and not all do): one connection per request, answered in a thread.
    fn server_without_usage(requests: usize, pieces: usize) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for conn in listener.incoming().take(requests) {
                let mut conn = conn.unwrap();
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut len = 0;
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                reader.read_exact(&mut vec![0; len]).unwrap();
                let mut body = String::new();
                for k in 0..pieces {
                    body += &format!("data: {{\"choices\":[{{\"text\":\"t{k}\"}}]}}\n\n");
                }
                body += "data: {\"choices\":[{\"text\":\"\"}]}\n\ndata: [DONE]\n\n";
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                conn.write_all(head.as_bytes()).unwrap();
                conn.write_all(body.as_bytes()).unwrap();
            }
        });
        url
    }

    #[test]
    fn streams_without_usage_count_their_text_events() {
        let url = server_without_usage(3, 5);
        let report = run_blocking(LoadgenConfig {
            url,
            concurrency: 1,
            requests: 3,
            max_tokens: 5,
            prompt: "p".into(),
            chat: false,
            prompt_ids: Some(4),
            api_key: None,
            timeout: Duration::from_secs(20),
        })
        .unwrap();
        assert_eq!(
            (report.ok, report.failed),
            (3, 0),
            "{:?}",
            report.first_error
        );
        assert_eq!(report.completion_tokens, 15);
        assert_eq!(report.itl.n, 12);
    }
}
