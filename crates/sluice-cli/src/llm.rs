//! `sluice generate | bench | graph | profile`: the model commands.

use std::path::PathBuf;
use std::time::Instant;

use sluice::graph::GraphOptions;
use sluice::profile::{idle_ns, op_table, CpuSpan};
use sluice::Device;
use sluice_llm::decode::{Decoder, Mode};
use sluice_llm::load::{open_model, LoadOptions};
use sluice_llm::sampler::Sampling;

use crate::out;
use crate::render::{chrome_trace, layer_table_md, timeline_svg};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// How the step is recorded.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ModeArg {
    /// Record every step
    Direct,
    /// Record once and resubmit
    Replay,
}

/// `--lowering`: how decode steps become dispatches.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum LoweringArg {
    /// Persistent where it is faster, barriers elsewhere
    Auto,
    /// One dispatch per op, pipeline barriers between dependent ones
    Barriers,
    /// One dispatch per decoder layer, grid barriers inside (f16 decode)
    Persistent,
}

/// `--dtype`: a weight format or llama.cpp mixture name (see `quant_mix::DTYPE_NAMES`).
pub(crate) fn parse_dtype(s: &str) -> Result<sluice_llm::quant_mix::QuantRequest, String> {
    sluice_llm::quant_mix::parse(s).map_err(|e| e.to_string())
}

/// `--tensor-type`: `ROLE=FORMAT` (see `quant_mix::parse_tensor_type`).
pub(crate) fn parse_tensor_type(
    s: &str,
) -> Result<(sluice_llm::quant_mix::Role, sluice_kernels::WeightDtype), String> {
    sluice_llm::quant_mix::parse_tensor_type(s).map_err(|e| e.to_string())
}

/// `--dtype` with the `--tensor-type` formats set in it (an error when there are some but
/// no `--dtype`: they choose formats for quantizing on load).
pub(crate) fn quant_request(
    dtype: Option<sluice_llm::quant_mix::QuantRequest>,
    tensor_types: &[(sluice_llm::quant_mix::Role, sluice_kernels::WeightDtype)],
) -> Result<Option<sluice_llm::quant_mix::QuantRequest>, String> {
    match dtype {
        Some(mut req) => {
            for &(role, dt) in tensor_types {
                req.tensor_types.set(role, dt);
            }
            Ok(Some(req))
        }
        None if tensor_types.is_empty() => Ok(None),
        None => Err("--tensor-type needs --dtype: it picks formats for quantizing on load".into()),
    }
}

/// Model options shared by generate, bench, graph and profile.
#[derive(clap::Args, Debug)]
pub struct ModelOpts {
    /// synthetic:tiny | synthetic:tiny-llama | synthetic:tiny-qwen2 | synthetic:tiny-llama3 |
    /// synthetic:tiny-256 | synthetic:tiny-gqa | synthetic:tiny-gqa128 | synthetic:tiny-wide |
    /// synthetic:qwen3-0.6b | synthetic:qwen3-4b | synthetic:llama3.2-1b | synthetic:smollm2-135m | a Hugging Face model
    /// directory | a .gguf file (Llama, Qwen2, Qwen3) (default: synthetic:qwen3-0.6b on a
    /// GPU, synthetic:tiny on a CPU driver)
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// Record every step, or record once and resubmit
    #[arg(long, value_enum, default_value_t = ModeArg::Replay)]
    pub mode: ModeArg,
    /// Weight formats on the GPU: f16 bf16 f32 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k,
    /// or llama.cpp's mixtures q4_k_m q5_k_m (default: as stored; synthetic: f16).
    /// Matrices are quantized on load (the LM head gets q6_k, as llama.cpp does); rows
    /// that fit no block of the format fall back as llama.cpp's quantizer does
    #[arg(long, value_name = "FORMAT", value_parser = parse_dtype)]
    pub dtype: Option<sluice_llm::quant_mix::QuantRequest>,
    /// With --dtype: every matrix of ROLE (llama.cpp's tensor names: attn_q attn_k attn_v
    /// attn_output ffn_gate ffn_up ffn_down token_embd output) in FORMAT instead, as
    /// llama-quantize's option (repeatable; e.g. --dtype q4_k_m --tensor-type attn_v=q4_k)
    #[arg(long = "tensor-type", value_name = "ROLE=FORMAT", value_parser = parse_tensor_type)]
    pub tensor_type: Vec<(sluice_llm::quant_mix::Role, sluice_kernels::WeightDtype)>,
    /// KV-cache capacity in tokens
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=sluice_llm::load::MAX_CONTEXT as u64))]
    pub context: Option<u64>,
    /// Most positions per attention workgroup (split); shorter contexts use fewer (from 32,
    /// or 128 above 16 heads, doubled until eight splits hold the context)
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub attention_chunk: u32,
    /// Batched engines (--sequences): positions per attention split at least, a row's
    /// context running as ceil(context / N) splits of about equal length (at most 8); 0:
    /// one split per row (default: 512 in engines of up to 16 sequences, one split above;
    /// --sequences builds one engine of its largest count)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=1_048_576))]
    pub batch_attention_split: Option<u32>,
    /// Prompt tokens per prefill dispatch
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=sluice_llm::load::MAX_PREFILL_CHUNK as i64))]
    pub prefill_chunk: u32,
    /// Single-sequence prefill: the projections on the prefill matmul kernels instead of
    /// the batched engine's matrix-unit matvecs, and the attention on the scalar flash
    /// kernel instead of the matrix units (A/B; devices without matrix units always run
    /// the tiled matmul and the scalar attention)
    #[arg(long)]
    pub no_prefill_matrix_units: bool,
    /// Threads per matvec row (power of two in 32..=256; default by row length)
    #[arg(long, value_name = "N")]
    pub matvec_tpr: Option<u32>,
    /// Separate norm, rope/KV-append (batched decode steps too), gate/up and silu·mul
    /// kernels, and the greedy pick in a dispatch of its own after the LM head (A/B)
    #[arg(long)]
    pub no_fuse: bool,
    /// Decode of block formats: down quantizes the gate/up output itself instead of
    /// reading the int8 blocks the gate/up wrote (o likewise the attention's), and in
    /// batched engines on integer dot products o and down theirs instead of reading the
    /// attention's and the gate/up's (A/B)
    #[arg(long)]
    pub no_q8_handoff: bool,
    /// Single-sequence decode of layers whose q|k and v have two block formats (the K_M
    /// mixtures): one dispatch per format instead of one for both (A/B)
    #[arg(long)]
    pub no_two_format_qkv: bool,
    /// Decode lowering: one dispatch per op behind pipeline barriers; one persistent
    /// dispatch per layer whose workgroups meet at grid barriers (layers whose matrices
    /// share one format, f16 or a block format, and the Q4_K_M / Q5_K_M mixtures' layers;
    /// other layers keep the barriers; refused when no layer qualifies); or auto:
    /// persistent where the device and model allow it and it is faster (hidden <= 2048,
    /// every layer in f16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K or the Q4_K_M mixture,
    /// short contexts), barriers elsewhere
    #[arg(long, value_enum, default_value_t = LoweringArg::Auto)]
    pub lowering: LoweringArg,
    /// Workgroups per persistent layer dispatch (default: one per multiprocessor; more
    /// than the device holds at once is refused)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub persistent_groups: Option<u32>,
    /// Keep the captured order (replay)
    #[arg(long)]
    pub no_reorder: bool,
    /// Reorder window
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub lookahead: u32,
}

/// Shared model options, resolved.
pub(crate) struct ModelArgs {
    pub(crate) model: String,
    pub(crate) mode: Mode,
    pub(crate) load: LoadOptions,
    pub(crate) graph: GraphOptions,
}

pub(crate) fn model_args(
    o: &ModelOpts,
    device: &Device,
    default_context: usize,
) -> Result<ModelArgs, String> {
    let model = match &o.model {
        Some(m) => m.clone(),
        None => sluice_llm::load::default_model(device).to_string(),
    };
    let mode = match o.mode {
        ModeArg::Direct => Mode::Direct,
        ModeArg::Replay => Mode::Replay,
    };
    let mut load = LoadOptions::default();
    load.gpu.context = match o.context {
        Some(c) => usize::try_from(c).map_err(err)?,
        None => default_context,
    };
    load.gpu.attention_chunk = o.attention_chunk;
    load.gpu.batch_attention_split = o.batch_attention_split;
    load.gpu.prefill_chunk = o.prefill_chunk as usize;
    load.gpu.prefill_matrix_units = !o.no_prefill_matrix_units;
    load.gpu.matvec_threads_per_row = o.matvec_tpr;
    load.dtype = quant_request(o.dtype, &o.tensor_type)?;
    load.gpu.fuse_gate_up = !o.no_fuse;
    load.gpu.fuse_norm = !o.no_fuse;
    load.gpu.fuse_attention = !o.no_fuse;
    load.gpu.fuse_pick = o.no_fuse.then_some(false);
    load.gpu.q8_handoff = !o.no_q8_handoff;
    load.gpu.two_format_qkv = !o.no_two_format_qkv;
    load.gpu.lowering = match o.lowering {
        LoweringArg::Barriers => sluice_llm::gpu::Lowering::Barriers,
        LoweringArg::Persistent => sluice_llm::gpu::Lowering::Persistent,
        LoweringArg::Auto => sluice_llm::gpu::Lowering::Auto,
    };
    load.gpu.persistent_groups = o.persistent_groups;
    let graph = GraphOptions {
        reorder: !o.no_reorder,
        lookahead: o.lookahead as usize,
    };
    Ok(ModelArgs {
        model,
        mode,
        load,
        graph,
    })
}

/// `sluice generate` options.
#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelOpts,
    /// Prompt text (needs tokenizer.json in the model directory)
    #[arg(long, conflicts_with = "prompt_ids")]
    prompt: Option<String>,
    /// Prompt token ids, comma-separated
    #[arg(long, value_name = "1,2,3")]
    prompt_ids: Option<String>,
    /// Read the prompt text from FILE ('-': standard input)
    #[arg(long, value_name = "FILE", conflicts_with_all = ["prompt", "prompt_ids"])]
    prompt_file: Option<PathBuf>,
    /// Apply the model's chat template to the prompt as one user message (and generate
    /// the assistant's answer)
    #[arg(long, conflicts_with = "prompt_ids")]
    chat: bool,
    /// System message for --chat (default: the template's own, if any)
    #[arg(long, value_name = "TEXT", requires = "chat")]
    system: Option<String>,
    /// Tokens to generate
    #[arg(short = 'n', default_value_t = 32)]
    n: usize,
    /// Sampling temperature (0: greedy)
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Keep the K most likely tokens (0: all)
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Nucleus cut in (0, 1]
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Seed of the random draws
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Keep generating through end-of-generation tokens (EOS, <|im_end|>, ...)
    #[arg(long)]
    ignore_eos: bool,
    /// Stop before this text (repeatable)
    #[arg(long, value_name = "TEXT")]
    stop: Vec<String>,
    /// Print {"prompt_ids", "tokens", "text", "stop_reason", "tok_s", ...} instead of streaming
    #[arg(long)]
    json: bool,
    /// Write the logits after the prompt (f32 little-endian) to FILE
    #[arg(long, value_name = "FILE")]
    logits_out: Option<PathBuf>,
}

/// `sluice bench` options.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    model: ModelOpts,
    /// Tokens to generate per run (tg row; 0: none)
    #[arg(short = 'n', default_value_t = 128, value_parser = clap::value_parser!(u32).range(0..=sluice_llm::load::MAX_CONTEXT as i64))]
    n: u32,
    /// Prompt tokens per run (a ppN row of prompt processing; 0: none)
    #[arg(short = 'p', default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=sluice_llm::load::MAX_CONTEXT as i64))]
    p: u32,
    /// Tokens in the KV cache before the measured run (filled by prefill once per row; the
    /// fill's progress goes to stderr)
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=sluice_llm::load::MAX_CONTEXT as i64))]
    depth: u32,
    /// Runs; rows report mean ± standard deviation
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    repeat: u32,
    /// Batched decode instead: for each count N in the list, N sequences with -p prompt
    /// tokens each (default 128), then -n steps advancing all of them (like
    /// llama-batched-bench's pp/tg); rows report aggregate tok/s and step latency
    #[arg(long, value_name = "N,N,...", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=4096))]
    sequences: Vec<u32>,
    /// Print JSON instead of a table row
    #[arg(long)]
    json: bool,
}

/// `sluice bench --sequences`: the batched engine over a paged KV cache.
fn bench_batched(args: &BenchArgs, device: &Device) -> Result<(), String> {
    let n = (args.n as usize).max(1);
    let prompt = if args.p == 0 { 128 } else { args.p as usize };
    let most = *args.sequences.iter().max().unwrap_or(&1) as usize;
    let block = sluice_llm::gpu::DEFAULT_KV_BLOCK;
    let seq_context = (prompt + n + 1).next_multiple_of(block);
    let pool = most
        .checked_mul(seq_context)
        .and_then(|v| v.checked_add(block))
        .filter(|&v| v <= sluice_llm::load::MAX_CONTEXT)
        .ok_or_else(|| {
            format!("{most} sequences x {seq_context} positions exceed the largest KV pool")
        })?;
    let mut m = model_args(&args.model, device, pool)?;
    m.load.gpu.context = pool;
    m.load.gpu.paged = Some(sluice_llm::gpu::PagedOptions {
        max_rows: most,
        sequences: most,
        seq_context,
        block,
    });
    let loaded = open_model(device, &m.model, &m.load, progress(args.json)).map_err(err)?;
    let mut runner =
        sluice_llm::batch::BatchRunner::new(&loaded.model, m.mode, m.graph).map_err(err)?;
    // Clocks up before the first count: its untimed run is a few milliseconds, and the
    // H100 measured a one-row step at 9.4 ms right after a load against 2.6 warm.
    warm_clocks(device)?;
    let mut rows = Vec::new();
    for &seqs in &args.sequences {
        // One untimed run per count: recordings, pipelines and clocks.
        sluice_llm::bench::bench_batched(&mut runner, seqs as usize, prompt, n.min(8))
            .map_err(err)?;
        let mut runs = Vec::new();
        for _ in 0..args.repeat.max(1) {
            runs.push(
                sluice_llm::bench::bench_batched(&mut runner, seqs as usize, prompt, n)
                    .map_err(err)?,
            );
        }
        runs.sort_by(|a, b| a.tg_tok_s.total_cmp(&b.tg_tok_s));
        let samples: Vec<f64> = runs.iter().map(|r| r.tg_tok_s).collect();
        let (mean, sd) = sluice_llm::bench::mean_stddev(&samples);
        let median = runs.swap_remove(runs.len() / 2);
        rows.push((median, mean, sd));
    }
    if args.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(r, mean, sd)| {
                serde_json::json!({
                    "device": device.info().name, "model": m.model, "dtype": loaded.dtype,
                    "mode": format!("{:?}", m.mode), "row": r, "tg_avg_ts": mean, "tg_stddev_ts": sd,
                })
            })
            .collect();
        return outln!("{}", serde_json::to_string_pretty(&v).map_err(err)?);
    }
    outln!("| model | device | dtype | sequences | pp | tg | pp t/s | tg t/s (all sequences) | step ms mean | p50 | p99 | disp/step |")?;
    outln!("|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    for (r, mean, sd) in &rows {
        outln!(
            "| {} | {} | {} | {} | {} | {} | {:.0} | {mean:.1} ± {sd:.1} | {:.3} | {:.3} | {:.3} | {:.0} |",
            m.model,
            device.info().name,
            loaded.dtype,
            r.sequences,
            r.prompt,
            r.n_gen,
            r.pp_tok_s,
            r.step_ms_mean,
            r.step_ms_p50,
            r.step_ms_p99,
            r.dispatches_per_step
        )?;
    }
    Ok(())
}

/// What `sluice graph` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Dump {
    /// Human-readable
    Text,
    /// JSON
    Json,
}

/// `sluice graph` options.
#[derive(clap::Args, Debug)]
pub struct GraphArgs {
    #[command(flatten)]
    model: ModelOpts,
    /// Output format
    #[arg(long, value_enum, default_value_t = Dump::Text)]
    dump: Dump,
}

/// `sluice profile` options.
#[derive(clap::Args, Debug)]
pub struct ProfileArgs {
    #[command(flatten)]
    model: ModelOpts,
    /// Decode steps to run (the last is reported)
    #[arg(short = 'n', default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    n: u32,
    /// Output directory
    #[arg(long, value_name = "DIR", default_value = "profile")]
    out: PathBuf,
    /// Profile the batched step with N sequences (each at position 128) instead
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096), conflicts_with = "prompt")]
    sequences: Option<u32>,
    /// Profile a prefill chunk of N prompt tokens (from position 0; at most
    /// --prefill-chunk) instead
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=sluice_llm::load::MAX_PREFILL_CHUNK as i64))]
    prompt: Option<u32>,
}

/// Two buffers copied into each other: warms the GPU up (clocks idle low after a load; a
/// profile of a few steps would otherwise run, and measure, at a fraction of the speed)
/// and measures the device's read bandwidth with a kernel streaming one of them.
struct BandwidthProbe {
    device: Device,
    a: sluice::Buffer,
    b: sluice::Buffer,
    /// The streaming kernel's anchor (read) and sink (written only on a magic xor).
    small: [sluice::Buffer; 2],
    bytes: u64,
    /// Two timestamps around each run, where the device has them (reset by each encoder).
    queries: Option<sluice::TimestampQueries>,
}

impl BandwidthProbe {
    /// 256 MiB buffers on a GPU, 16 MiB on a CPU driver.
    fn new(device: &Device) -> Result<BandwidthProbe, String> {
        let bytes: u64 = if device.info().device_type == "cpu" {
            16 << 20
        } else {
            256 << 20
        };
        let class = sluice::ResourceClass::TokenScratch;
        Ok(BandwidthProbe {
            device: device.clone(),
            a: device
                .create_buffer("bandwidth.a", bytes, class)
                .map_err(err)?,
            b: device
                .create_buffer("bandwidth.b", bytes, class)
                .map_err(err)?,
            small: [
                device
                    .create_buffer("bandwidth.anchor", 256, class)
                    .map_err(err)?,
                device
                    .create_buffer("bandwidth.sink", 256, class)
                    .map_err(err)?,
            ],
            bytes,
            queries: if device.info().timestamps {
                Some(sluice::TimestampQueries::new(device, 2).map_err(err)?)
            } else {
                None
            },
        })
    }

    /// Seconds `reps` copies (`stream`: reads of buffer a by `sluice_kernels::PREFETCH`,
    /// every 32-byte sector once) take: GPU timestamps around them where the device has
    /// them (host timing would add the submit and wait, several times the work's own time
    /// on a fast GPU), else the host's clock.
    fn run(&self, reps: u32, stream: bool) -> Result<f64, String> {
        let queries = &self.queries;
        let reader = if stream {
            Some(
                self.device
                    .pipeline(&sluice_kernels::PREFETCH)
                    .map_err(err)?,
            )
        } else {
            None
        };
        let sectors = u32::try_from(self.bytes / 32).map_err(err)?;
        // About eight sectors per invocation.
        let threads = (sectors / 8).next_multiple_of(256);
        let push = sluice_kernels::PrefetchPush {
            sectors,
            threads,
            magic: 0x9E37_79B9,
        };
        let t = Instant::now();
        let mut enc = self.device.encoder().map_err(err)?;
        if let Some(q) = queries {
            enc.write_timestamp(q, 0).map_err(err)?;
        }
        for i in 0..reps {
            match &reader {
                Some(k) => enc
                    .dispatch(
                        k,
                        [threads / 256, 1, 1],
                        &[
                            self.a.slice(..),
                            self.small[0].slice(..),
                            self.small[1].slice(..),
                        ],
                        &push,
                    )
                    .map_err(err)?,
                None => {
                    let (src, dst) = if i % 2 == 0 {
                        (&self.a, &self.b)
                    } else {
                        (&self.b, &self.a)
                    };
                    enc.copy(src.slice(..), dst.slice(..)).map_err(err)?;
                }
            }
        }
        if let Some(q) = queries {
            enc.write_timestamp(q, 1).map_err(err)?;
        }
        enc.submit().map_err(err)?.wait().map_err(err)?;
        let host = t.elapsed().as_secs_f64();
        match queries {
            Some(q) => {
                let ns = q.read_ns().map_err(err)?;
                Ok((ns[1] - ns[0]) / 1e9)
            }
            None => Ok(host),
        }
    }

    /// Copies until `secs` of wall time have passed.
    fn warm_up(&self, secs: f64) -> Result<(), String> {
        let t = Instant::now();
        while t.elapsed().as_secs_f64() < secs {
            self.run(4, false)?;
        }
        Ok(())
    }

    /// The device's read bandwidth in GB/s: the best of three runs of eight streams over
    /// buffer a. (A copy measures less: on the H100 a vkCmdCopyBuffer moves ~850 GB/s of
    /// reads + writes where kernels read ~3 TB/s.)
    fn bandwidth(&self) -> Result<f64, String> {
        let reps = 8;
        let mut secs = f64::INFINITY;
        for _ in 0..3 {
            secs = secs.min(self.run(reps, true)?);
        }
        if secs <= 0.0 {
            return Err(format!("the read bandwidth timing read {secs} s"));
        }
        Ok(self.bytes as f64 * reps as f64 / secs / 1e9)
    }
}

/// Wall time `sluice profile` (and `bench --sequences`, before its first count) keeps the
/// GPU busy with copies before the measured steps.
const PROFILE_WARM_UP_SECS: f64 = 0.5;

pub(crate) fn progress(quiet: bool) -> impl FnMut(u64, u64) {
    use std::io::IsTerminal;
    let start = Instant::now();
    // A live bar on a terminal; in logs only the final line.
    let mut bar = LoadBar::new(std::io::stderr().is_terminal());
    move |done, total| {
        if quiet {
            return;
        }
        if let Some(line) = bar.update(done, total, start.elapsed().as_secs_f64()) {
            eprint!("{line}");
        }
    }
}

/// A prefill's progress line on stderr, "{what}: done / total tokens (s)": on a terminal
/// redrawn after each prefill chunk and ended when the prefill ends; in a log only that
/// last line, and only with `log_end` (the `bench --depth` fill: one line per row). Nothing
/// when `quiet`.
pub(crate) fn prefill_progress(
    quiet: bool,
    what: &'static str,
    log_end: bool,
) -> impl FnMut(usize, usize) {
    use std::io::IsTerminal;
    let live = std::io::stderr().is_terminal();
    let mut start = Instant::now();
    move |done, total| {
        if done == 0 {
            start = Instant::now(); // a prefill begins (one per row of a fill)
        }
        let last = done >= total;
        // A log gets the last line only, and only with `log_end`.
        let shown = live || (last && log_end);
        if quiet || total == 0 || !shown {
            return;
        }
        let end = if last { "\n" } else { "" };
        eprint!(
            "\r{what}: {done} / {total} tokens ({:.1} s){end}",
            start.elapsed().as_secs_f64()
        );
    }
}

/// The "loading weights" line: on a terminal redrawn every 5% (`live`), in a log written
/// once; the 100% line once, ending the line, however often the loader reports it.
struct LoadBar {
    live: bool,
    last: Option<u64>,
    finished: bool,
}

impl LoadBar {
    fn new(live: bool) -> LoadBar {
        LoadBar {
            live,
            last: None,
            finished: false,
        }
    }

    /// What to print for `done` of `total` bytes after `secs` seconds, if anything.
    fn update(&mut self, done: u64, total: u64, secs: f64) -> Option<String> {
        if total == 0 || self.finished || (!self.live && done < total) {
            return None;
        }
        let pct = done.min(total) * 100 / total;
        if self.last.is_some_and(|l| pct < l + 5) && done < total {
            return None;
        }
        self.last = Some(pct);
        self.finished = done >= total;
        Some(format!(
            "\rloading weights: {:>3}% ({:.2} / {:.2} GB, {:.1} s){}",
            pct,
            done.min(total) as f64 / 1e9,
            total as f64 / 1e9,
            secs,
            if self.finished { "\n" } else { "" }
        ))
    }
}

fn parse_ids(s: &str) -> Result<Vec<u32>, String> {
    s.split(',')
        .filter(|t| !t.trim().is_empty())
        .map(|t| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| format!("--prompt-ids: {t:?} is not a token id"))
        })
        .collect()
}

/// `sluice generate`.
pub fn generate(args: &GenerateArgs, device: &Device) -> Result<(), String> {
    let json = args.json;
    let m = model_args(&args.model, device, 4352)?;
    let n = args.n;
    let sampling = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
    };
    sampling.check().map_err(err)?;
    let mut m = m;
    if !sampling.is_greedy() {
        m.load.gpu.sampling = Some(sampling);
    }
    let logits_out = args.logits_out.clone();
    let prompt_text = match &args.prompt_file {
        Some(path) => Some(read_prompt_file(path)?),
        None => args.prompt.clone(),
    };
    if args.chat && prompt_text.is_none() {
        return Err("--chat needs a prompt: --prompt TEXT or --prompt-file FILE".into());
    }
    let prompt_ids = args.prompt_ids.as_deref().map(parse_ids).transpose()?;
    // Before loading: the new tokens alone must fit the context.
    if n >= m.load.gpu.context {
        return Err(format!(
            "-n {n} new tokens do not fit the context of {} tokens (raise --context)",
            m.load.gpu.context
        ));
    }
    let loaded = open_model(device, &m.model, &m.load, progress(json)).map_err(err)?;
    let prompt = match (prompt_ids, &prompt_text, &loaded.tokenizer) {
        (Some(ids), _, _) => ids,
        (None, Some(text), Some(tok)) if args.chat => {
            chat_prompt(tok, args.system.as_deref(), text)
                .map_err(|e| format!("{}: {e}", m.model))?
        }
        (None, Some(text), Some(tok)) => tok.encode(text, true, true).map_err(err)?,
        (None, Some(_), None) => {
            return Err(format!(
                "{} has no tokenizer.json: give --prompt-ids",
                m.model
            ))
        }
        (None, None, _) => vec![loaded.model.config().bos_token.unwrap_or(1)],
    };
    let decoder = Decoder::new(&loaded.model, m.mode, m.graph).map_err(err)?;
    let stream = !json;
    let tok = loaded.tokenizer.as_ref();
    // The first write error (a full disk) stops the streaming and is reported at the end;
    // a closed pipe ends the program quietly (see `out`).
    let mut write_error: Option<String> = None;
    let opts = sluice_llm::run::GenerateOptions {
        max_tokens: n,
        sampling,
        ignore_eos: args.ignore_eos,
        stop: args.stop.clone(),
        start: 0,
        cancel: None,
    };
    // Prompts longer than one prefill chunk show their progress (on a terminal).
    let quiet = json || prompt.len() <= loaded.model.prefill_chunk();
    let mut on_prompt = prefill_progress(quiet, "prompt", false);
    let result = sluice_llm::run::generate_with_progress(
        &decoder,
        tok,
        &prompt,
        &opts,
        &mut on_prompt,
        |t, text| {
            if stream && write_error.is_none() {
                let written = match (tok, t) {
                    (Some(_), _) => out!("{text}"),
                    (None, Some(t)) => out!("{t} "),
                    (None, None) => Ok(()),
                };
                if let Err(e) = written.and_then(|()| out::flush()) {
                    write_error = Some(e);
                }
            }
        },
    )
    .map_err(err)?;
    if let Some(e) = write_error {
        return Err(e);
    }
    if let Some(path) = logits_out {
        // The logits after the prompt: recompute that step (the cache is reset by rewriting it).
        let logits = sluice_llm::run::prompt_logits(&decoder, &prompt).map_err(err)?;
        let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if json {
        outln!("{}", serde_json::to_string(&result).map_err(err)?)?;
    } else {
        outln!()?;
        eprintln!(
            "{} tokens ({:?}), {:.1} tok/s decode, {:.1} tok/s prompt",
            result.tokens.len(),
            result.stop_reason,
            result.tok_s,
            result.prefill_tok_s
        );
    }
    Ok(())
}

/// Largest prompt file read, in bytes.
const MAX_PROMPT_BYTES: u64 = 64 << 20;

/// The prompt text of `--prompt-file` ('-': standard input), at most [`MAX_PROMPT_BYTES`].
fn read_prompt_file(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let what = path.display().to_string();
    let read = if what == "-" {
        std::io::stdin()
            .lock()
            .take(MAX_PROMPT_BYTES + 1)
            .read_to_end(&mut bytes)
    } else {
        let meta = std::fs::metadata(path).map_err(|e| format!("{what}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("{what}: not a regular file"));
        }
        std::fs::File::open(path).and_then(|f| f.take(MAX_PROMPT_BYTES + 1).read_to_end(&mut bytes))
    };
    read.map_err(|e| format!("{what}: {e}"))?;
    if bytes.len() as u64 > MAX_PROMPT_BYTES {
        return Err(format!(
            "{what}: prompt longer than {MAX_PROMPT_BYTES} bytes"
        ));
    }
    String::from_utf8(bytes).map_err(|e| format!("{what}: not UTF-8 text ({e})"))
}

/// `text` as one user message (after `system`, if given) through the model's chat
/// template, tokenized with special tokens parsed; BOS added only when the model asks for
/// it and the template did not write it.
fn chat_prompt(
    tok: &sluice_llm::tokenizer::Tokenizer,
    system: Option<&str>,
    text: &str,
) -> Result<Vec<u32>, String> {
    use sluice_llm::chat::{ChatTemplate, Message};
    let src = tok.chat_template().ok_or(
        "the model has no chat template (tokenizer.chat_template / tokenizer_config.json)",
    )?;
    let bos = tok.bos_text().unwrap_or("");
    let template = ChatTemplate::new(src, bos, tok.eos_text().unwrap_or("")).map_err(err)?;
    let mut messages = Vec::new();
    if let Some(s) = system {
        messages.push(Message::new("system", s));
    }
    messages.push(Message::new("user", text));
    let rendered = template.render(&messages, true).map_err(err)?;
    let add_bos = tok.add_bos() && (bos.is_empty() || !rendered.starts_with(bos));
    tok.encode(&rendered, add_bos, true).map_err(err)
}

/// Keeps a GPU busy for [`PROFILE_WARM_UP_SECS`] so that timed runs after a load start at
/// working clocks. Best effort: a device without room for the probe's buffers measures as
/// before; CPU drivers have no clocks to raise.
fn warm_clocks(device: &Device) -> Result<(), String> {
    if device.info().device_type != "cpu" {
        match BandwidthProbe::new(device) {
            Ok(probe) => probe.warm_up(PROFILE_WARM_UP_SECS)?,
            Err(e) => log::debug!("bench: no clock warm-up ({e})"),
        }
    }
    Ok(())
}

/// `sluice bench`: llama-bench-like `pp` (with `-p N`) and `tg` (`-n N`) rows, mean ±
/// standard deviation over `--repeat` runs.
pub fn bench(args: &BenchArgs, device: &Device) -> Result<(), String> {
    if !args.sequences.is_empty() {
        return bench_batched(args, device);
    }
    let json = args.json;
    let n = args.n as usize;
    let prompt = args.p as usize;
    let depth = args.depth as usize;
    let repeat = args.repeat as usize;
    let context = depth
        .checked_add(n.max(prompt))
        .and_then(|c| c.checked_add(64))
        .filter(|&c| c <= sluice_llm::load::MAX_CONTEXT)
        .ok_or_else(|| {
            format!(
                "--depth {depth} + max(-n {n}, -p {prompt}) + 64 exceeds the largest context, {} tokens",
                sluice_llm::load::MAX_CONTEXT
            )
        })?;
    let m = model_args(&args.model, device, context)?;
    let loaded = open_model(device, &m.model, &m.load, progress(json)).map_err(err)?;
    let decoder = Decoder::new(&loaded.model, m.mode, m.graph).map_err(err)?;
    let params = sluice_llm::bench::BenchParams {
        prompt,
        n,
        depth,
        repeat: repeat.max(1),
    };
    if depth > 0 && !json {
        // Long on a CPU device (quadratic attention): say what the wait is.
        eprintln!("filling the KV cache to {depth} tokens (once per row), then timing");
    }
    // A 512-token prefill of the 0.6B takes ~10 ms: right after a (CPU-bound) quantizing
    // load the H200 ran the first five of them at a quarter of the speed.
    warm_clocks(device)?;
    let mut fill = prefill_progress(json, "filling the KV cache", true);
    let s =
        sluice_llm::bench::bench_suite_with(&decoder, &m.model, &loaded.dtype, &params, &mut fill)
            .map_err(err)?;
    if json {
        return outln!("{}", serde_json::to_string_pretty(&s).map_err(err)?);
    }
    outln!("| model | device | dtype | mode | test | t/s | ms/tok | disp/tok | barriers/tok | waits/tok | weights GB | GB/s | CPU µs/tok |")?;
    outln!("|---|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    let mode = s
        .decode
        .as_ref()
        .map(|d| format!("{:?}", d.mode))
        .unwrap_or_else(|| format!("{:?}", m.mode));
    for row in &s.rows {
        let ts = format!("{:.2} ± {:.2}", row.avg_ts, row.stddev_ts);
        match (&s.decode, row.n_gen > 0) {
            (Some(r), true) => outln!(
                "| {} | {} | {} | {mode} | {} | {ts} | {:.3} | {:.0} | {:.0} | {:.2} | {:.3} | {:.0} | {:.1} |",
                s.model,
                s.device,
                s.dtype,
                row.test,
                r.ms_per_token,
                r.dispatches_per_token,
                r.barriers_per_token,
                r.host_waits_per_token,
                r.weight_bytes as f64 / 1e9,
                r.weight_gb_s,
                r.cpu_record_submit_us_per_token
            )?,
            _ => outln!(
                "| {} | {} | {} | {mode} | {} | {ts} | {:.3} | | | | | | |",
                s.model,
                s.device,
                s.dtype,
                row.test,
                1e3 / row.avg_ts
            )?,
        }
    }
    if repeat > 1 {
        for row in &s.rows {
            let all: Vec<String> = row.samples_ts.iter().map(|v| format!("{v:.1}")).collect();
            outln!("({} over {} runs: {})", row.test, repeat, all.join(", "))?;
        }
    }
    Ok(())
}

/// `sluice graph --dump text|json`.
pub fn graph(args: &GraphArgs, device: &Device) -> Result<(), String> {
    let m = model_args(&args.model, device, 512)?;
    let loaded = open_model(device, &m.model, &m.load, progress(true)).map_err(err)?;
    let g = Decoder::graph(&loaded.model, m.graph).map_err(err)?;
    match args.dump {
        Dump::Text => out!("{}", g.dump_text()),
        Dump::Json => outln!("{}", serde_json::to_string_pretty(&g.dump()).map_err(err)?),
    }
}

/// `sluice profile --out DIR`.
pub fn profile(args: &ProfileArgs, device: &Device) -> Result<(), String> {
    let out = args.out.clone();
    let n = args.n as usize;
    let prompt = args.prompt.map(|p| p as usize);
    let mut m = model_args(&args.model, device, n.max(prompt.unwrap_or(0)) + 64)?;
    if let Some(p) = prompt.filter(|&p| p > m.load.gpu.prefill_chunk) {
        return Err(format!(
            "--prompt {p} is longer than a prefill chunk ({}; see --prefill-chunk)",
            m.load.gpu.prefill_chunk
        ));
    }
    const POS: usize = 128;
    if let Some(seqs) = args.sequences {
        let seqs = seqs as usize;
        let block = sluice_llm::gpu::DEFAULT_KV_BLOCK;
        m.load.gpu.context = (seqs + 1) * (POS + block);
        m.load.gpu.paged = Some(sluice_llm::gpu::PagedOptions {
            max_rows: seqs,
            sequences: seqs,
            seq_context: POS + block,
            block,
        });
    }
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let loaded = open_model(device, &m.model, &m.load, progress(false)).map_err(err)?;
    let model = &loaded.model;
    let t0 = Instant::now();
    let ns = |t: Instant| t.duration_since(t0).as_secs_f64() * 1e9;
    let mut cpu = Vec::new();
    let r0 = Instant::now();
    let graph = match (args.sequences, prompt) {
        (None, None) => Decoder::graph(model, m.graph).map_err(err)?,
        (None, Some(p)) => {
            // Token ids 1, 2, ... (timing only).
            let vocab = model.config().vocab.max(2);
            let ids: Vec<u32> = (0..p).map(|i| (1 + i % (vocab - 1)) as u32).collect();
            model.set_prefill_params(&ids, 0).map_err(err)?;
            let mut cap = device.capture();
            model.encode_prefill(&mut cap, p).map_err(err)?;
            let mut g = cap.finish_capture().map_err(err)?;
            g.optimize(m.graph);
            g
        }
        (Some(seqs), _) => {
            // Every sequence at position POS (its cache holds whatever is there: timing only).
            let mut runner =
                sluice_llm::batch::BatchRunner::new(model, m.mode, m.graph).map_err(err)?;
            let mut rows = Vec::new();
            for _ in 0..seqs {
                let slot = runner.open().map_err(err)?;
                runner.reserve(slot, POS + 1).map_err(err)?;
                rows.push(sluice_llm::gpu::BatchRow {
                    token: 1,
                    pos: POS as u32,
                    slot,
                });
            }
            model.set_batch_rows(&rows).map_err(err)?;
            let mut cap = device.capture();
            model
                .encode_batch(&mut cap, seqs as usize, false)
                .map_err(err)?;
            let mut g = cap.finish_capture().map_err(err)?;
            g.optimize(m.graph);
            g
        }
    };
    let replay = graph.record_with(true).map_err(err)?;
    cpu.push(CpuSpan {
        name: "capture+schedule+record (once)".into(),
        begin_ns: ns(r0),
        dur_ns: r0.elapsed().as_secs_f64() * 1e9,
    });
    if args.sequences.is_none() && prompt.is_none() {
        model.set_params(1, 0).map_err(err)?;
    }
    // Clocks up before the profiled steps (a CPU driver has none: a token warm-up there).
    let probe = BandwidthProbe::new(device)?;
    let warm_secs = if device.info().device_type == "cpu" {
        0.02
    } else {
        PROFILE_WARM_UP_SECS
    };
    probe.warm_up(warm_secs)?;
    let mut timings = Vec::new();
    for _ in 0..n.max(1) {
        let s0 = Instant::now();
        let ticket = replay.submit().map_err(err)?;
        cpu.push(CpuSpan {
            name: "submit".into(),
            begin_ns: ns(s0),
            dur_ns: s0.elapsed().as_secs_f64() * 1e9,
        });
        let w0 = Instant::now();
        ticket.wait().map_err(err)?;
        cpu.push(CpuSpan {
            name: "wait".into(),
            begin_ns: ns(w0),
            dur_ns: w0.elapsed().as_secs_f64() * 1e9,
        });
        timings = replay.timings().map_err(err)?;
    }
    // Bytes: weights a dispatch reads (matvec and embedding ops). The embedding binds the
    // whole table but reads one row of it per token (per sequence in a batched step).
    let nodes = graph.nodes();
    let vocab = model.config().vocab as u64;
    let tokens = args
        .sequences
        .map(|s| s as u64)
        .or(prompt.map(|p| p as u64))
        .unwrap_or(1);
    let bytes = |i: usize| -> Option<u64> {
        let op = nodes[i].label.split(' ').next().unwrap_or("");
        let embed = op == "embed" || op == "batch.embed";
        let w: u64 = nodes[i]
            .bindings
            .iter()
            .filter(|(b, _, _)| {
                b.class() == sluice::ResourceClass::ReadOnlyWeight && b.size() > 1 << 16
            })
            .map(|(_, _, l)| {
                if embed {
                    *l / vocab.max(1) * tokens
                } else {
                    *l
                }
            })
            .sum();
        (w > 0).then_some(w)
    };
    let ops = op_table(&timings, bytes);
    let gpu_us: f64 = timings.iter().map(|t| t.us()).sum();
    let span_us = timings.iter().map(|t| t.end_ns).fold(0.0, f64::max)
        - timings
            .iter()
            .map(|t| t.begin_ns)
            .fold(f64::INFINITY, f64::min);
    let groups = timings
        .iter()
        .map(|t| t.group)
        .max()
        .map(|g| g + 1)
        .unwrap_or(0);
    let trace = chrome_trace(&timings, &cpu);
    std::fs::write(
        out.join("trace.json"),
        serde_json::to_string(&trace).map_err(err)?,
    )
    .map_err(err)?;
    let title = format!("{} on {}", m.model, device.info().name);
    std::fs::write(
        out.join("timeline.svg"),
        timeline_svg(&title, &timings, &ops),
    )
    .map_err(err)?;
    let bandwidth = probe.bandwidth()?;
    let mut table = String::new();
    let what = match prompt {
        Some(p) => format!("a prefill chunk of {p} tokens"),
        None => "one token".to_string(),
    };
    table += &format!(
        "{title}: {what} (last of {n}, after {warm_secs} s of copies to bring the clocks up), profiled replay (timestamps around every dispatch)\n\n"
    );
    table += &format!(
        "floor = the op's weight bytes / the device's measured read bandwidth ({bandwidth:.2} GB/s: a kernel streaming {} MiB): the time it could take if it only streamed its weights\n\n",
        probe.bytes >> 20
    );
    table += "| op | count/token | GPU µs/token | share | weight GB/s | floor µs | above floor µs |\n|---|---|---|---|---|---|---|\n";
    for o in &ops {
        let floor = o.bytes.map(|b| b as f64 / (bandwidth * 1e3));
        let dash = || "-".to_string();
        table += &format!(
            "| {} | {} | {:.1} | {:.1}% | {} | {} | {} |\n",
            o.op,
            o.count,
            o.gpu_us,
            o.share * 100.0,
            o.gb_s.map(|g| format!("{g:.0}")).unwrap_or_else(dash),
            floor.map(|f| format!("{f:.1}")).unwrap_or_else(dash),
            floor
                .map(|f| format!("{:.1}", o.gpu_us - f))
                .unwrap_or_else(dash)
        );
    }
    table += &format!(
        "\ndispatches/token {}, barriers/token {}, GPU busy {:.1} µs, span {:.1} µs, idle between dispatches {:.1} µs\n",
        timings.len(),
        groups.saturating_sub(1) + 1,
        gpu_us,
        span_us / 1e3,
        idle_ns(&timings) / 1e3
    );
    std::fs::write(out.join("table.md"), &table).map_err(err)?;
    std::fs::write(
        out.join("ops.json"),
        serde_json::to_string_pretty(&ops).map_err(err)?,
    )
    .map_err(err)?;
    let layers = sluice::profile::layer_table(&timings);
    std::fs::write(
        out.join("layers.md"),
        format!(
            "{title}: GPU µs of each dispatch by layer and op (the token of table.md)\n\n{}",
            layer_table_md(&layers)
        ),
    )
    .map_err(err)?;
    std::fs::write(
        out.join("layers.json"),
        serde_json::to_string_pretty(&layers).map_err(err)?,
    )
    .map_err(err)?;
    out!("{table}")?;
    eprintln!(
        "wrote {}/trace.json, timeline.svg, table.md, ops.json, layers.md, layers.json",
        out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::LoadBar;

    #[test]
    fn load_bar_ends_once_and_logs_only_the_end() {
        // In a log: nothing until the end, then one line, whatever the loader reports after.
        let mut log = LoadBar::new(false);
        assert_eq!(log.update(10, 100, 0.1), None);
        let end = log.update(100, 100, 2.0).unwrap();
        assert_eq!(end, "\rloading weights: 100% (0.00 / 0.00 GB, 2.0 s)\n");
        assert_eq!(log.update(100, 100, 2.5), None);
        assert_eq!(log.update(120, 100, 3.0), None);
        // On a terminal: every 5%, then the end once.
        let mut live = LoadBar::new(true);
        let shown: Vec<u64> = (0..=100)
            .filter(|&d| live.update(d, 100, 0.0).is_some())
            .collect();
        assert_eq!(shown, (0..=100).step_by(5).collect::<Vec<u64>>());
        assert_eq!(live.update(100, 100, 0.0), None);
        assert_eq!(LoadBar::new(true).update(5, 0, 0.0), None);
    }
}
