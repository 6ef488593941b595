//! The HTTP layer: OpenAI-compatible routes on axum, answering from a [`Scheduler`].

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::api::{parse_body, ChatRequest, CompletionRequest, Prompt, Settings};
use crate::error::{Result, ServeError};
use crate::scheduler::{Event, Finish, GenRequest, Scheduler};
use crate::text::{StopMatcher, StreamDecoder, TextCodec};

/// HTTP-side settings.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Model name reported by `/v1/models` and in responses.
    pub model_name: String,
    /// Bearer token required on `/v1/*` and `/metrics` (`None`: open).
    pub api_key: Option<String>,
    /// Largest accepted request body in bytes.
    pub body_limit: usize,
    /// Time a request may take from arrival to its last token (queueing included).
    pub request_timeout: Duration,
    /// `max_tokens` when a request gives none (capped by the context).
    pub default_max_tokens: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            model_name: "sluice".into(),
            api_key: None,
            body_limit: 1 << 20,
            request_timeout: Duration::from_secs(600),
            default_max_tokens: 512,
        }
    }
}

struct Inner {
    sched: Scheduler,
    codec: Arc<TextCodec>,
    cfg: ServerConfig,
    created: u64,
}

/// Shared state of the routes.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn new_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    format!("{prefix}-{:x}{n:04x}", t & 0xffff_ffff_ffff)
}

/// The router with every route: `POST /v1/chat/completions`, `POST /v1/completions`,
/// `GET /v1/models`, `GET /health`, `GET /metrics`.
pub fn router(sched: Scheduler, codec: Arc<TextCodec>, cfg: ServerConfig) -> Router {
    let state = AppState(Arc::new(Inner {
        sched,
        codec,
        cfg,
        created: now_s(),
    }));
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` resolves, then waits for open
/// requests to end (see [`Scheduler::drain`] / [`Scheduler::abort`] to end them).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| ServeError::io("serve HTTP", e))
}

fn error_response(e: &ServeError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (status, json_body(&e.body())).into_response();
    if matches!(e, ServeError::QueueFull { .. } | ServeError::Unavailable(_)) {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if matches!(e, ServeError::Unauthorized) {
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    r
}

fn json_body(v: &Value) -> ([(header::HeaderName, &'static str); 1], String) {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string())
}

fn fail(s: &AppState, e: ServeError) -> Response {
    s.0.sched.metrics().requests_failed.fetch_add(1, Relaxed);
    error_response(&e)
}

async fn not_found() -> Response {
    let e = ServeError::BadRequest {
        message: "no such route; try /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics".into(),
        code: "not_found",
    };
    (StatusCode::NOT_FOUND, json_body(&e.body())).into_response()
}

fn check_auth(s: &AppState, headers: &HeaderMap) -> Result<()> {
    let Some(key) = &s.0.cfg.api_key else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    // Compare without an early exit on the first differing byte.
    let ok = given.is_some_and(|g| {
        g.len() == key.len()
            && g.bytes()
                .zip(key.bytes())
                .fold(0u8, |a, (x, y)| a | (x ^ y))
                == 0
    });
    if ok {
        Ok(())
    } else {
        Err(ServeError::Unauthorized)
    }
}

async fn read_body(s: &AppState, body: Body) -> Result<Bytes> {
    let limit = s.0.cfg.body_limit;
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ServeError::BadRequest {
            message: format!("request body larger than {limit} bytes or unreadable"),
            code: "body_too_large",
        })
}

async fn health(State(s): State<AppState>) -> Response {
    let ok = s.0.sched.healthy();
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({"status": if ok {"ok"} else {"unavailable"}});
    (status, json_body(&body)).into_response()
}

async fn metrics(State(s): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(e) = check_auth(&s, &headers) {
        return error_response(&e);
    }
    let text = s.0.sched.metrics().render(&s.0.cfg.model_name);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

async fn models(State(s): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(e) = check_auth(&s, &headers) {
        return error_response(&e);
    }
    let body = json!({
        "object": "list",
        "data": [{
            "id": s.0.cfg.model_name,
            "object": "model",
            "created": s.0.created,
            "owned_by": "sluice",
            "context_length": s.0.sched.info().context,
            "max_running_sequences": s.0.sched.info().max_running,
        }]
    });
    (StatusCode::OK, json_body(&body)).into_response()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Text,
}

async fn chat(State(s): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    s.0.sched.metrics().requests_chat.fetch_add(1, Relaxed);
    match handle(&s, &headers, body, Kind::Chat).await {
        Ok(r) => r,
        Err(e) => fail(&s, e),
    }
}

async fn completions(State(s): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    s.0.sched.metrics().requests_text.fetch_add(1, Relaxed);
    match handle(&s, &headers, body, Kind::Text).await {
        Ok(r) => r,
        Err(e) => fail(&s, e),
    }
}

/// Runs the CPU-side work of a request (tokenizing) off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ServeError::Model(format!("tokenizer task failed: {e}")))?
}

async fn handle(s: &AppState, headers: &HeaderMap, body: Body, kind: Kind) -> Result<Response> {
    check_auth(s, headers)?;
    let bytes = read_body(s, body).await?;
    let codec = s.0.codec.clone();
    let (prompt, settings) = match kind {
        Kind::Chat => {
            let req: ChatRequest = parse_body(&bytes)?;
            let settings = req.common.settings()?;
            let prompt = blocking(move || codec.encode_chat(&req.messages)).await?;
            (prompt, settings)
        }
        Kind::Text => {
            let req: CompletionRequest = parse_body(&bytes)?;
            let settings = req.common.settings()?;
            let prompt = match req.prompt {
                Prompt::Ids(ids) => ids,
                Prompt::Text(t) => blocking(move || codec.encode(&t)).await?,
                Prompt::Texts(mut v) if v.len() == 1 => {
                    let t = v.remove(0);
                    blocking(move || codec.encode(&t)).await?
                }
                Prompt::Texts(v) => {
                    return Err(ServeError::bad_request(format!(
                        "prompt has {} strings; only one prompt per request is supported",
                        v.len()
                    )))
                }
            };
            (prompt, settings)
        }
    };
    let context = s.0.sched.info().context;
    if prompt.is_empty() {
        return Err(ServeError::bad_request("the prompt is empty"));
    }
    let vocab = s.0.sched.info().vocab;
    if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= vocab) {
        return Err(ServeError::bad_request(format!(
            "token id {bad} is outside the vocabulary of {vocab} tokens"
        )));
    }
    let room = context.saturating_sub(prompt.len());
    let max_tokens = match settings.max_tokens {
        _ if room == 0 => 0,
        Some(m) => m,
        None => s.0.cfg.default_max_tokens.min(room),
    };
    if room == 0 || max_tokens > room {
        return Err(ServeError::BadRequest {
            message: format!(
                "this model's context is {context} tokens; the prompt has {} tokens and max_tokens is {}: reduce the prompt or max_tokens",
                prompt.len(),
                settings.max_tokens.map_or("unset".to_string(), |m| m.to_string()),
            ),
            code: "context_length_exceeded",
        });
    }
    let prompt_tokens = prompt.len();
    let rx = s.0.sched.submit(GenRequest {
        prompt,
        max_tokens,
        sampling: settings.sampling,
        stop_tokens: s.0.codec.eog_tokens(),
        timeout: s.0.cfg.request_timeout,
    })?;
    let gen = Generation {
        rx: Some(rx),
        decoder: s.0.codec.stream(),
        stop: StopMatcher::new(settings.stop.clone()),
        tokens: 0,
        finish: None,
    };
    let meta = Meta {
        id: new_id(if kind == Kind::Chat {
            "chatcmpl"
        } else {
            "cmpl"
        }),
        created: now_s(),
        model: s.0.cfg.model_name.clone(),
        kind,
        prompt_tokens,
    };
    if settings.stream {
        Ok(stream_response(s.clone(), gen, meta, &settings))
    } else {
        whole_response(gen, meta).await
    }
}

struct Meta {
    id: String,
    created: u64,
    model: String,
    kind: Kind,
    prompt_tokens: usize,
}

impl Meta {
    fn usage(&self, completion: usize) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        })
    }
}

/// One generation's events turned into text with stop strings applied.
struct Generation {
    rx: Option<UnboundedReceiver<Event>>,
    decoder: StreamDecoder,
    stop: StopMatcher,
    tokens: usize,
    finish: Option<Finish>,
}

impl Generation {
    /// The next text piece; `Ok(None)` once finished (`self.finish` is set).
    async fn next(&mut self) -> Result<Option<String>> {
        loop {
            if self.finish.is_some() {
                return Ok(None);
            }
            let Some(rx) = self.rx.as_mut() else {
                return Ok(None);
            };
            let ev = rx.recv().await.ok_or_else(|| {
                ServeError::Unavailable("the engine stopped during the request".into())
            })?;
            match ev {
                Event::Started => {}
                Event::Token(t) => {
                    self.tokens += 1;
                    let piece = self.decoder.push(t);
                    let (out, hit) = self.stop.push(&piece);
                    if hit {
                        self.end(Finish::Stop);
                    }
                    if !out.is_empty() {
                        return Ok(Some(out));
                    }
                }
                Event::Done(f) => {
                    let tail = self.decoder.finish();
                    let (mut out, hit) = self.stop.push(&tail);
                    if !hit {
                        out.push_str(&self.stop.flush());
                    }
                    self.end(if hit { Finish::Stop } else { f });
                    if !out.is_empty() {
                        return Ok(Some(out));
                    }
                }
                Event::Failed(e) => {
                    self.rx = None;
                    return Err(e);
                }
            }
        }
    }

    fn end(&mut self, f: Finish) {
        self.finish = Some(f);
        // Dropping the receiver frees the sequence at the next token boundary.
        self.rx = None;
    }
}

async fn whole_response(mut gen: Generation, meta: Meta) -> Result<Response> {
    let mut text = String::new();
    while let Some(piece) = gen.next().await? {
        text.push_str(&piece);
    }
    let finish = gen.finish.unwrap_or(Finish::Length).as_str();
    let choice = match meta.kind {
        Kind::Chat => json!({
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": null,
            "finish_reason": finish,
        }),
        Kind::Text => json!({
            "index": 0,
            "text": text,
            "logprobs": null,
            "finish_reason": finish,
        }),
    };
    let body = json!({
        "id": meta.id,
        "object": if meta.kind == Kind::Chat { "chat.completion" } else { "text_completion" },
        "created": meta.created,
        "model": meta.model,
        "choices": [choice],
        "usage": meta.usage(gen.tokens),
    });
    Ok((StatusCode::OK, json_body(&body)).into_response())
}

enum Phase {
    Start,
    Running,
    Usage,
    Done,
    End,
}

struct StreamState {
    app: AppState,
    gen: Generation,
    meta: Meta,
    include_usage: bool,
    phase: Phase,
}

impl StreamState {
    fn chunk(&self, piece: Option<&str>, role: bool, finish: Option<Finish>) -> Value {
        let finish = finish.map(Finish::as_str);
        let choice = match self.meta.kind {
            Kind::Chat => {
                let mut delta = serde_json::Map::new();
                if role {
                    delta.insert("role".into(), "assistant".into());
                }
                if let Some(p) = piece {
                    delta.insert("content".into(), p.into());
                }
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
            Kind::Text => json!({
                "index": 0, "text": piece.unwrap_or(""), "logprobs": null, "finish_reason": finish,
            }),
        };
        let mut v = json!({
            "id": self.meta.id,
            "object": if self.meta.kind == Kind::Chat { "chat.completion.chunk" } else { "text_completion" },
            "created": self.meta.created,
            "model": self.meta.model,
            "choices": [choice],
        });
        if self.include_usage {
            v["usage"] = Value::Null;
        }
        v
    }

    /// The next SSE frames, `None` at the end.
    async fn frames(&mut self) -> Option<String> {
        let data = |v: &Value| format!("data: {v}\n\n");
        match self.phase {
            Phase::Start => {
                self.phase = Phase::Running;
                if self.meta.kind == Kind::Chat {
                    return Some(data(&self.chunk(Some(""), true, None)));
                }
                Some(String::new())
            }
            Phase::Running => match self.gen.next().await {
                Ok(Some(piece)) => Some(data(&self.chunk(Some(&piece), false, None))),
                Ok(None) => {
                    self.phase = if self.include_usage {
                        Phase::Usage
                    } else {
                        Phase::Done
                    };
                    let f = self.gen.finish.unwrap_or(Finish::Length);
                    let piece = (self.meta.kind == Kind::Text).then_some("");
                    Some(data(&self.chunk(piece, false, Some(f))))
                }
                Err(e) => {
                    self.app
                        .0
                        .sched
                        .metrics()
                        .requests_failed
                        .fetch_add(1, Relaxed);
                    self.phase = Phase::Done;
                    Some(data(&e.body()))
                }
            },
            Phase::Usage => {
                self.phase = Phase::Done;
                let mut v = self.chunk(None, false, None);
                v["choices"] = json!([]);
                v["usage"] = self.meta.usage(self.gen.tokens);
                Some(data(&v))
            }
            Phase::Done => {
                self.phase = Phase::End;
                Some("data: [DONE]\n\n".into())
            }
            Phase::End => None,
        }
    }
}

fn stream_response(app: AppState, gen: Generation, meta: Meta, settings: &Settings) -> Response {
    let state = StreamState {
        app,
        gen,
        meta,
        include_usage: settings.include_usage,
        phase: Phase::Start,
    };
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        let frames = st.frames().await?;
        Some((Ok::<Bytes, Infallible>(Bytes::from(frames)), st))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|e| {
            error_response(&ServeError::Model(format!(
                "cannot build the response: {e}"
            )))
        })
}
