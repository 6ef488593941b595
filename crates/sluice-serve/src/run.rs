//! Running a server over a real model: the GPU engine thread, the listener, signals.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice::graph::GraphOptions;
use sluice_llm::decode::{Decoder, Mode};
use sluice_llm::load::{open_model, LoadOptions};

use crate::batch_engine::{BatchEngine, PromptSteps};
use crate::engine::GpuEngine;
use crate::error::{Result, ServeError};
use crate::metrics::Metrics;
use crate::scheduler::{Limits, Scheduler};
use crate::server::{router, serve, ServerConfig};
use crate::text::TextCodec;
use sluice_llm::batch::BatchRunner;
use sluice_llm::gpu::PagedOptions;

/// Which model to serve and how to build it.
#[derive(Clone, Debug)]
pub struct ModelSource {
    /// `synthetic:NAME` or a Hugging Face directory.
    pub spec: String,
    /// Device options (adapter, validation, barriers).
    pub device: sluice::Options,
    /// Load options (dtype, context, fusion). GPU sampling is turned off: the engine
    /// samples non-greedy requests on the host with each request's settings.
    pub load: LoadOptions,
    /// Direct or replay decode.
    pub mode: Mode,
    /// Graph options (replay).
    pub graph: GraphOptions,
    /// Continuous batching over a paged KV cache with these limits (`load.gpu.context`
    /// is then the pool of positions all sequences share); `None`: the single-sequence
    /// engine.
    pub batch: Option<PagedOptions>,
    /// How the batched engine runs prompts (ignored by the single-sequence engine).
    pub prompts: PromptSteps,
    /// Record every batched step ahead, before the server reports itself started
    /// ([`BatchEngine::record_ahead`]): requests then never wait for a recording or for
    /// the pipelines (the first request of a server that does not waits ~1 s).
    pub record_ahead: bool,
}

/// A started GPU engine.
pub struct GpuServer {
    /// The scheduler handle.
    pub scheduler: Scheduler,
    /// Tokenizer adapter of the model.
    pub codec: Arc<TextCodec>,
    /// The weight formats on the GPU (`q4_k+q6_k`, `f16`, ...).
    pub weights: String,
    /// Validation messages the device collected, filled when the engine thread exits.
    pub validation: Arc<Mutex<Vec<String>>>,
    /// Batched steps recorded ahead and the time it took ([`ModelSource::record_ahead`]).
    pub recorded_ahead: (usize, Duration),
}

/// Opens the device and the model on a new engine thread and starts the scheduler there.
pub fn start_gpu(source: ModelSource, limits: Limits) -> Result<GpuServer> {
    let metrics = Arc::new(Metrics::default());
    let validation = Arc::new(Mutex::new(Vec::new()));
    let (codec_tx, codec_rx) = std::sync::mpsc::channel::<(TextCodec, String, (usize, Duration))>();
    let v2 = validation.clone();
    let scheduler = Scheduler::start(limits, metrics, move |serve_with| {
        let device = sluice::Device::new(source.device.clone())?;
        let mut load = source.load.clone();
        load.gpu.sampling = None;
        load.gpu.paged = source.batch.clone();
        let loaded = open_model(&device, &source.spec, &load, |_, _| {})?;
        let eos = loaded.model.config().eos_token;
        let codec = TextCodec::new(loaded.tokenizer, eos)?;
        if source.batch.is_some() {
            let runner = BatchRunner::new(&loaded.model, source.mode, source.graph)?;
            let mut engine = BatchEngine::new(runner, source.prompts);
            // Ready (the codec sent) only once every step is recorded.
            let t = std::time::Instant::now();
            let recorded = if source.record_ahead {
                engine.record_ahead()?
            } else {
                0
            };
            let _ = codec_tx.send((codec, loaded.dtype.clone(), (recorded, t.elapsed())));
            serve_with(&mut engine);
        } else {
            let _ = codec_tx.send((codec, loaded.dtype.clone(), (0, Duration::ZERO)));
            let decoder = Decoder::new(&loaded.model, source.mode, source.graph)?;
            let mut engine = GpuEngine::new(decoder);
            serve_with(&mut engine);
        }
        // No GPU work may outlive the engine.
        let synced = device.synchronize();
        let mut v = v2.lock().unwrap_or_else(|e| e.into_inner());
        v.extend(
            device
                .validation_messages()
                .iter()
                .map(|m| format!("[{}] {}: {}", m.severity, m.id, m.text)),
        );
        synced?;
        Ok(())
    })?;
    let (codec, weights, recorded_ahead) = codec_rx
        .recv()
        .map_err(|_| ServeError::Unavailable("the engine did not report its tokenizer".into()))?;
    Ok(GpuServer {
        scheduler,
        codec: Arc::new(codec),
        weights,
        validation,
        recorded_ahead,
    })
}

/// Where and how to listen.
#[derive(Clone, Debug)]
pub struct ListenOptions {
    /// Address to bind (default 127.0.0.1).
    pub host: String,
    /// Port (0: any free port).
    pub port: u16,
    /// Time in-flight requests get to finish after SIGTERM/SIGINT before they are cancelled.
    pub shutdown_grace: Duration,
}

impl Default for ListenOptions {
    fn default() -> Self {
        ListenOptions {
            host: "127.0.0.1".into(),
            port: 8080,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// Waits for SIGINT or SIGTERM.
async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Serves `server` until SIGINT/SIGTERM: then stops accepting connections, refuses queued
/// requests, lets running ones finish within the grace period (then cancels them), and
/// returns once the engine thread has exited with no GPU work left. `on_bound` sees the
/// bound address (printed by the CLI).
pub fn run_until_signal(
    server: GpuServer,
    config: ServerConfig,
    listen: ListenOptions,
    on_bound: impl FnOnce(SocketAddr),
) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| ServeError::io("start the async runtime", e))?;
    let sched = server.scheduler.clone();
    let result = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind((listen.host.as_str(), listen.port))
            .await
            .map_err(|e| ServeError::io(format!("bind {}:{}", listen.host, listen.port), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| ServeError::io("local address", e))?;
        on_bound(addr);
        let app = router(sched.clone(), server.codec.clone(), config);
        let s2 = sched.clone();
        let grace = listen.shutdown_grace;
        serve(listener, app, async move {
            signal().await;
            eprintln!(
                "sluice serve: shutting down (grace {:.0} s)",
                grace.as_secs_f64()
            );
            s2.drain();
            // Cancel what is still running after the grace period, so open streams end.
            let s3 = s2.clone();
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                s3.abort();
            });
        })
        .await
    });
    let clean = sched.shutdown(Duration::from_secs(5));
    if !clean {
        eprintln!("sluice serve: cancelled the work still running at shutdown");
    }
    let v = server.validation.lock().unwrap_or_else(|e| e.into_inner());
    if !v.is_empty() {
        eprintln!("sluice serve: {} validation message(s):", v.len());
        for m in v.iter() {
            eprintln!("  {m}");
        }
    }
    result
}
