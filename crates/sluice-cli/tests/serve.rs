//! `sluice serve` as a real process: it answers, a request in flight at SIGTERM finishes,
//! then the process exits 0 with no validation message; `sluice loadgen` against it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice_serve::client::{request, stream, Target};

struct Server {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: Vec<String>,
}

impl Server {
    /// Waits for a stderr line containing `pat` (all lines are kept).
    fn wait_for(&mut self, pat: &str, limit: Duration) -> String {
        let t = Instant::now();
        loop {
            let left = limit.saturating_sub(t.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.stderr.push(l.clone());
                    if l.contains(pat) {
                        return l;
                    }
                }
                Err(_) => panic!(
                    "no {pat:?} on stderr in {limit:?}:\n{}",
                    self.stderr.join("\n")
                ),
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &std::path::Path, extra: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "serve",
            "--validate",
            "--port",
            "0",
            "--context",
            "128",
            "--demo-model",
        ])
        .arg(dir)
        .args(extra)
        .env(
            "XDG_RUNTIME_DIR",
            std::env::var("XDG_RUNTIME_DIR").unwrap_or("/tmp".into()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    Server {
        child,
        lines,
        stderr: Vec::new(),
    }
}

#[test]
fn serve_finishes_in_flight_work_on_sigterm_and_exits_cleanly() {
    let dir = std::env::temp_dir().join(format!("sluice-cli-serve-{}", std::process::id()));
    let mut s = start(&dir, &["--api-key", "k", "--shutdown-grace", "30"]);
    let line = s.wait_for("listening on http://", Duration::from_secs(60));
    let url = line
        .split("listening on ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let t = Target::parse(&url).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let auth = [("authorization", "Bearer k")];

    // A load generator run: every request succeeds and tokens are counted.
    let report = sluice_serve::loadgen::run_blocking(sluice_serve::loadgen::LoadgenConfig {
        url: url.clone(),
        concurrency: 3,
        requests: 4,
        max_tokens: 4,
        prompt: "Hi".into(),
        chat: true,
        prompt_ids: None,
        api_key: Some("k".into()),
        timeout: Duration::from_secs(60),
    })
    .unwrap();
    assert_eq!((report.ok, report.failed), (4, 0), "{report:?}");
    assert!(
        report.completion_tokens >= 1 && report.ttft.n >= 1,
        "{report:?}"
    );

    // A stream in flight when SIGTERM arrives runs to its end.
    let body = json!({"prompt": "x", "max_tokens": 40, "temperature": 0, "stream": true});
    let (mut ev, first) = rt.block_on(async {
        let mut ev = stream(&t, "/v1/completions", &auth, body.to_string().into_bytes())
            .await
            .unwrap();
        assert_eq!(ev.status, 200);
        let first = ev.next().await.unwrap().unwrap().0;
        (ev, first)
    });
    assert_ne!(first, "[DONE]");
    let pid = s.child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    s.wait_for("shutting down", Duration::from_secs(10));
    let (finish, done) = rt.block_on(async {
        let (mut finish, mut done) = (Value::Null, false);
        while let Some((data, _)) = ev.next().await.unwrap() {
            if data == "[DONE]" {
                done = true;
                break;
            }
            let v: Value = serde_json::from_str(&data).unwrap();
            assert!(v.get("error").is_none(), "{v}");
            if !v["choices"][0]["finish_reason"].is_null() {
                finish = v["choices"][0]["finish_reason"].clone();
            }
        }
        (finish, done)
    });
    assert!(done, "the stream did not end with [DONE]");
    assert!(finish == "length" || finish == "stop", "{finish}");
    // New work is refused (connection refused or 503) once shutdown began.
    let late = rt.block_on(request(&t, "GET", "/health", &[], None));
    assert!(late.map_or(true, |r| r.status == 503));
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "server did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    while let Ok(l) = s.lines.recv_timeout(Duration::from_millis(500)) {
        s.stderr.push(l);
    }
    let log = s.stderr.join("\n");
    assert!(status.success(), "exit {status:?}\n{log}");
    assert!(log.contains("sluice serve: stopped"), "{log}");
    assert!(!log.contains("validation message"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_quantizes_on_load_with_dtype() {
    let dir = std::env::temp_dir().join(format!("sluice-cli-serve-q8-{}", std::process::id()));
    let mut s = start(&dir, &["--dtype", "q8_0", "--max-sequences", "2"]);
    let line = s.wait_for("listening on http://", Duration::from_secs(60));
    assert!(line.contains("weights q8_0"), "{line}");
    let url = line.split("listening on ").nth(1).unwrap();
    let t = Target::parse(url.split(' ').next().unwrap()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let body = json!({"prompt": "x", "max_tokens": 3, "temperature": 0});
    let r = rt
        .block_on(request(
            &t,
            "POST",
            "/v1/completions",
            &[],
            Some(body.to_string().into_bytes()),
        ))
        .unwrap();
    assert_eq!(r.status, 200);
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    let n = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((1..=3).contains(&n), "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}
