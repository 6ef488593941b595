//! `sluice serve` (an OpenAI-compatible HTTP server) and `sluice loadgen` (concurrent
//! streamed requests against such a server).

use std::time::Duration;

use sluice::graph::GraphOptions;
use sluice_llm::decode::Mode;
use sluice_llm::load::LoadOptions;
use sluice_serve::batch_engine::{PromptSteps, DEFAULT_STEP_PROMPT_TOKENS};
use sluice_serve::loadgen::{LoadgenConfig, LoadgenReport};
use sluice_serve::run::{run_until_signal, start_gpu, ListenOptions, ModelSource};
use sluice_serve::scheduler::Limits;
use sluice_serve::server::ServerConfig;

/// `sluice serve` options.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// A Hugging Face model directory (with tokenizer.json for text), a .gguf file or
    /// synthetic:NAME (no tokenizer: prompts as token ids)
    #[arg(long, value_name = "M", required_unless_present = "demo_model")]
    pub model: Option<String>,
    /// Write the tiny test chat model (random weights, byte tokenizer) to DIR and serve it
    #[arg(long, value_name = "DIR", hide = true)]
    pub demo_model: Option<std::path::PathBuf>,
    /// Address to bind
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to bind (0: any free port; the address is printed)
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on /v1/* and /metrics
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// Weight formats on the GPU, as `sluice bench --dtype` (f16 ... q6_k, q4_k_m, q5_k_m;
    /// default: as stored; synthetic: f16); matrices are quantized on load
    #[arg(long, value_name = "FORMAT", value_parser = crate::llm::parse_dtype)]
    pub dtype: Option<sluice_llm::quant_mix::QuantRequest>,
    /// With --dtype: every matrix of ROLE in FORMAT instead, as `sluice bench
    /// --tensor-type` (repeatable)
    #[arg(long = "tensor-type", value_name = "ROLE=FORMAT", value_parser = crate::llm::parse_tensor_type)]
    pub tensor_type: Vec<(sluice_llm::quant_mix::Role, sluice_kernels::WeightDtype)>,
    /// Model name in responses and /v1/models (default: the --model value)
    #[arg(long, value_name = "NAME")]
    pub served_model_name: Option<String>,
    /// Positions per request (prompt + generated)
    #[arg(long, value_name = "N", default_value_t = 4352, value_parser = clap::value_parser!(u64).range(16..=1_048_576))]
    pub context: u64,
    /// Sequences decoded together (continuous batching over a paged KV cache); 1: the
    /// single-sequence decoder, requests one after another (the fastest single stream;
    /// block-format models run batched decode rows on the matrix units from 8 for large
    /// layers and 32 for others, faster with many streams, slower for one)
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub max_sequences: u64,
    /// Prompt tokens a batched step carries besides the running sequences' next tokens (one
    /// pass over the weights for both; more where the step's last pass has rows to spare;
    /// smaller: steadier inter-token latency, later first tokens); 0: each prompt chunk
    /// runs as a step of its own before the decode step
    #[arg(long, value_name = "N", default_value_t = DEFAULT_STEP_PROMPT_TOKENS as u64, value_parser = clap::value_parser!(u64).range(0..=4096))]
    pub step_prompt_tokens: u64,
    /// KV-cache positions all running sequences share, in blocks of 16 (default: 4 x
    /// --context; memory follows the sequences' actual lengths)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(32..=1_048_576))]
    pub kv_pool: Option<u64>,
    /// Requests that may wait for the engine; more get 429
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub max_queue: u64,
    /// Seconds a request may take, queueing included
    #[arg(long, value_name = "S", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// Largest request body in bytes
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20, value_parser = clap::value_parser!(u64).range(1024..=(64 << 20)))]
    pub body_limit: u64,
    /// max_tokens of requests that give none
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub default_max_tokens: u64,
    /// Seconds running requests get to finish after SIGTERM/SIGINT before they are cancelled
    #[arg(long, value_name = "S", default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub shutdown_grace: u64,
    /// Positions per attention split at least: a sequence's context runs as
    /// ceil(context / N) splits of about equal length (at most 8), so a few long sequences
    /// still fill the GPU; 0: one split per sequence (default: 512 up to 16
    /// --max-sequences, one split above)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=1_048_576))]
    pub batch_attention_split: Option<u32>,
    /// Record every step instead of replaying the recorded one
    #[arg(long)]
    pub direct: bool,
    /// Record the batched steps as requests need them instead of all at start-up (faster
    /// start; the first request then waits for the pipelines, and a step of a new size or
    /// attention depth for its recording)
    #[arg(long)]
    pub no_record_ahead: bool,
}

/// Runs the server until SIGTERM/SIGINT. The device is opened on the engine thread
/// with `device` options (adapter, validation).
pub fn run(args: &ServeArgs, device: sluice::Options) -> Result<(), String> {
    let spec = match (&args.demo_model, &args.model) {
        (Some(dir), _) => {
            sluice_serve::testing::write_tiny_chat_model(dir).map_err(|e| e.to_string())?;
            dir.to_string_lossy().into_owned()
        }
        (None, Some(m)) => m.clone(),
        (None, None) => return Err("--model is required".into()),
    };
    let mut load = LoadOptions::default();
    let context = usize::try_from(args.context).map_err(|e| e.to_string())?;
    load.gpu.context = context;
    load.gpu.batch_attention_split = args.batch_attention_split;
    load.dtype = crate::llm::quant_request(args.dtype, &args.tensor_type)?;
    let prompt_tokens = args.step_prompt_tokens as usize;
    // Rows of a mixed step: every sequence, the prompt tokens, rounded up to whole row groups.
    let max_rows = (args.max_sequences as usize + prompt_tokens)
        .next_multiple_of(sluice_llm::gpu::BATCH_ROW_GROUP_MAX);
    if args.max_sequences > 1 && max_rows > sluice_llm::load::MAX_PREFILL_CHUNK {
        return Err(format!(
            "--max-sequences {} with --step-prompt-tokens {prompt_tokens} makes steps of {max_rows} rows; at most {} fit",
            args.max_sequences,
            sluice_llm::load::MAX_PREFILL_CHUNK
        ));
    }
    let batch = (args.max_sequences > 1).then(|| {
        const BLOCK: usize = sluice_llm::gpu::DEFAULT_KV_BLOCK;
        let pool = args
            .kv_pool
            .map_or(context.saturating_mul(4), |p| p as usize)
            .next_multiple_of(BLOCK)
            .min(sluice_llm::load::MAX_CONTEXT);
        load.gpu.context = pool;
        sluice_llm::gpu::PagedOptions {
            max_rows: if prompt_tokens > 0 {
                max_rows
            } else {
                args.max_sequences as usize
            },
            sequences: args.max_sequences as usize,
            seq_context: context.min(pool),
            block: BLOCK,
        }
    });
    let source = ModelSource {
        spec: spec.clone(),
        device,
        load,
        mode: if args.direct {
            Mode::Direct
        } else {
            Mode::Replay
        },
        graph: GraphOptions::default(),
        batch,
        prompts: if prompt_tokens > 0 {
            PromptSteps::Mixed {
                tokens: prompt_tokens,
            }
        } else {
            PromptSteps::Chunks
        },
        record_ahead: !args.no_record_ahead && !args.direct,
    };
    let limits = Limits {
        max_queue: args.max_queue as usize,
        max_running: 0,
    };
    eprintln!("sluice serve: loading {spec}");
    let server = start_gpu(source, limits).map_err(|e| e.to_string())?;
    let info = server.scheduler.info().clone();
    let weights = server.weights.clone();
    if let (n @ 1.., t) = server.recorded_ahead {
        eprintln!(
            "sluice serve: recorded {n} batched steps ahead (row counts x attention depths) in {:.2} s",
            t.as_secs_f64()
        );
    }
    let config = ServerConfig {
        model_name: args.served_model_name.clone().unwrap_or(spec),
        api_key: args.api_key.clone(),
        body_limit: args.body_limit as usize,
        request_timeout: Duration::from_secs(args.timeout),
        default_max_tokens: args.default_max_tokens as usize,
    };
    let listen = ListenOptions {
        host: args.host.clone(),
        port: args.port,
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
    };
    let text = if server.codec.has_tokenizer() {
        "text and token-id prompts"
    } else {
        "token-id prompts only (no tokenizer)"
    };
    run_until_signal(server, config, listen, |addr| {
        eprintln!(
            "sluice serve: listening on http://{addr} (context {}, {} sequence(s) at a time, weights {weights}, {text})",
            info.context, info.max_running
        );
    })
    .map_err(|e| e.to_string())?;
    eprintln!("sluice serve: stopped");
    Ok(())
}

/// `sluice loadgen` options.
#[derive(clap::Args, Debug)]
pub struct LoadgenArgs {
    /// Server base URL
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Requests in flight at once
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub concurrency: u64,
    /// Requests in all
    #[arg(long, value_name = "M", default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub requests: u64,
    /// max_tokens of each request
    #[arg(long, value_name = "T", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub max_tokens: u64,
    /// Prompt text (each request appends its number)
    #[arg(long, default_value = "Write a short story about a river.")]
    pub prompt: String,
    /// Use /v1/chat/completions (default /v1/completions)
    #[arg(long)]
    pub chat: bool,
    /// Send prompts of N token ids instead of text (models without a tokenizer)
    #[arg(long, value_name = "N", conflicts_with_all = ["chat", "prompt"], value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub prompt_ids: Option<u64>,
    /// Bearer key
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// Seconds one request may take
    #[arg(long, value_name = "S", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

/// Runs the load and prints the report; fails when any request failed.
pub fn loadgen(args: &LoadgenArgs) -> Result<(), String> {
    let cfg = LoadgenConfig {
        url: args.url.clone(),
        concurrency: args.concurrency as usize,
        requests: args.requests as usize,
        max_tokens: args.max_tokens as usize,
        prompt: args.prompt.clone(),
        chat: args.chat,
        prompt_ids: args.prompt_ids.map(|n| n as usize),
        api_key: args.api_key.clone(),
        timeout: Duration::from_secs(args.timeout),
    };
    let r: LoadgenReport = sluice_serve::loadgen::run_blocking(cfg).map_err(|e| e.to_string())?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "requests: {} ok, {} failed; {} completion tokens in {:.2} s",
            r.ok, r.failed, r.completion_tokens, r.wall_s
        );
        println!("aggregate: {:.1} tok/s", r.aggregate_tok_s);
        println!(
            "time to first token: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (mean {:.1}, n {})",
            r.ttft.p50_ms, r.ttft.p99_ms, r.ttft.max_ms, r.ttft.mean_ms, r.ttft.n
        );
        println!(
            "inter-token latency: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (mean {:.2}, n {})",
            r.itl.p50_ms, r.itl.p99_ms, r.itl.max_ms, r.itl.mean_ms, r.itl.n
        );
    }
    match &r.first_error {
        Some(e) => Err(format!("{} request(s) failed; first: {e}", r.failed)),
        None => Ok(()),
    }
}
