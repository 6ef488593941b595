//! The `sluice` command line: `info`, `demo`, `microbench`.

mod args;
mod demo;
mod info;
mod llm;
mod microbench;
mod serve;

use args::Args;
use sluice::{BarrierMode, Device, Options, Validation};

const USAGE: &str = "\
sluice — Vulkan runtime for LLM decode

USAGE:
  sluice info [--json]                       the chosen Vulkan device
  sluice demo [--json]                       100 small dispatches in Auto and Serial mode vs CPU
  sluice microbench dispatch [--json] [-n 1000] [--runs 5]
                                             GPU µs per tiny dispatch, dependent vs independent
  sluice microbench sync [--json]            host wait costs
  sluice generate [--model M] (--prompt TEXT | --prompt-ids 1,2,3) [-n 32]
                  [--temperature T --top-k K --top-p P --seed S] [--json] [--logits-out FILE]
  sluice bench [--model M] [-n 128] [--depth D] [--repeat R] [--json]
  sluice graph [--model M] [--dump text|json]
  sluice profile [--model M] [-n 16] [--out DIR]
  sluice serve --model M [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--context N]
               [--max-queue N] [--timeout S] [--shutdown-grace S]   (see sluice serve --help)
                                             OpenAI-compatible HTTP server (one sequence at a time)
  sluice loadgen [--url URL] [--concurrency N] [--requests M] [--max-tokens T] [--chat] [--json]
                                             streamed requests: aggregate tok/s, TTFT, inter-token latency

MODEL OPTIONS:
  --model M           synthetic:tiny | synthetic:tiny-llama | synthetic:qwen3-0.6b |
                      synthetic:qwen3-4b | a Hugging Face model directory
                      (default: synthetic:qwen3-0.6b on a GPU, synthetic:tiny on a CPU driver)
  --mode direct|replay   record every step, or record once and resubmit (default replay)
  --dtype f16|bf16|f32   weight dtype on the GPU (default: as stored; synthetic: f16)
  --context N         KV-cache capacity in tokens
  --attention-chunk N positions per attention workgroup (1..=256)
  --prefill-chunk N   prompt tokens per prefill dispatch (default 16)
  --matvec-tpr N      threads per matvec row (32..256; default by row length)
  --no-fuse           separate norm, rope/KV-append, gate/up and silu·mul kernels (A/B)
  --no-reorder        keep the captured order (replay)
  --lookahead N       reorder window (default 64)

COMMON OPTIONS:
  --adapter NAME      use the first device whose name contains NAME
  --serial            a barrier between every two dispatches (A/B against Auto)
  --validate          enable the Khronos validation layer with synchronization validation
";

fn options(args: &Args) -> Options {
    Options {
        adapter: args.value("adapter").map(str::to_string),
        barriers: if args.flag("serial") {
            BarrierMode::Serial
        } else {
            BarrierMode::Auto
        },
        validation: if args.flag("validate") {
            Validation::Synchronization
        } else {
            Validation::Off
        },
        ..Options::default()
    }
}

fn print<T: serde::Serialize>(value: &T, json: bool, table: impl FnOnce(&T)) -> Result<(), String> {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(value).map_err(|e| e.to_string())?
        );
    } else {
        table(value);
    }
    Ok(())
}

/// `serve` and `loadgen`, parsed with clap.
#[derive(clap::Parser, Debug)]
#[command(name = "sluice", max_term_width = 100)]
enum ServeCli {
    /// OpenAI-compatible HTTP server
    Serve {
        /// Use the first device whose name contains NAME
        #[arg(long, value_name = "NAME")]
        adapter: Option<String>,
        /// Khronos validation with synchronization validation
        #[arg(long)]
        validate: bool,
        #[command(flatten)]
        args: serve::ServeArgs,
    },
    /// Concurrent streamed requests against a server
    Loadgen(serve::LoadgenArgs),
}

fn serve_command(raw: &[String]) -> Result<(), String> {
    use clap::Parser;
    let cli = match ServeCli::try_parse_from(
        std::iter::once("sluice".to_string()).chain(raw.iter().cloned()),
    ) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match cli {
        ServeCli::Serve {
            adapter,
            validate,
            args,
        } => {
            let opts = Options {
                adapter,
                validation: if validate {
                    Validation::Synchronization
                } else {
                    Validation::Off
                },
                ..Options::default()
            };
            serve::run(&args, opts)
        }
        ServeCli::Loadgen(args) => serve::loadgen(&args),
    }
}

fn run(raw: Vec<String>) -> Result<(), String> {
    let Some(cmd) = raw.first().cloned() else {
        print!("{USAGE}");
        return Ok(());
    };
    if cmd == "serve" || cmd == "loadgen" {
        return serve_command(&raw);
    }
    let args = Args::parse(
        &raw[1..],
        &[
            "json",
            "serial",
            "validate",
            "help",
            "no-fuse",
            "no-reorder",
        ],
    );
    if args.flag("help") || cmd == "help" || cmd == "--help" || cmd == "-h" {
        print!("{USAGE}");
        return Ok(());
    }
    let json = args.flag("json");
    let opts = options(&args);
    let open = |o: Options| Device::new(o).map_err(|e| e.to_string());
    let result = match cmd.as_str() {
        "info" => {
            args.finish()?;
            info::run(&open(opts)?, json)
        }
        "demo" => {
            args.finish()?;
            let device = open(opts)?;
            let report = demo::run(&device).map_err(|e| e.to_string())?;
            let messages = device.validation_messages();
            print(&report, json, |r| {
                println!("device: {}", r.device);
                println!(
                    "{:<8} {:>10} {:>9} {:>8}",
                    "mode", "dispatches", "barriers", "elided"
                );
                for (name, m) in [("auto", &r.auto), ("serial", &r.serial)] {
                    println!(
                        "{name:<8} {:>10} {:>9} {:>8}",
                        m.dispatches, m.barriers, m.barriers_elided
                    );
                }
                println!(
                    "results match CPU: {}; auto equals serial: {}",
                    r.results_match_cpu, r.auto_equals_serial
                );
            })?;
            if !messages.is_empty() {
                return Err(format!(
                    "{} validation message(s), first: {}",
                    messages.len(),
                    messages[0].text
                ));
            }
            if !(report.results_match_cpu && report.auto_equals_serial) {
                return Err("results differ".into());
            }
            Ok(())
        }
        "microbench" => {
            let which = args.positional(0).unwrap_or("").to_string();
            let count: u32 = args.parsed("n", 1000)?;
            let runs: u32 = args.parsed("runs", 5)?;
            args.finish()?;
            let device = open(opts)?;
            match which.as_str() {
                "dispatch" => {
                    let r = microbench::dispatch(&device, count.max(1), runs.max(1))
                        .map_err(|e| e.to_string())?;
                    print(&r, json, |r| {
                        println!(
                            "device: {}  ({} dispatches, median of {} runs)",
                            r.device, r.dispatches, r.runs
                        );
                        println!(
                            "dependent chain:  {:.3} µs GPU per dispatch ({} barriers)",
                            r.chain_gpu_us_per_dispatch, r.chain_barriers
                        );
                        println!(
                            "independent:      {:.3} µs GPU per dispatch ({} barriers)",
                            r.independent_gpu_us_per_dispatch, r.independent_barriers
                        );
                        println!(
                            "recording:        {:.3} µs CPU per dispatch",
                            r.record_cpu_us_per_dispatch
                        );
                    })
                }
                "sync" => {
                    let r = microbench::sync(&device).map_err(|e| e.to_string())?;
                    print(&r, json, |r| {
                        println!("device: {}", r.device);
                        println!(
                            "wait on a completed ticket:   {:.1} ns (median)",
                            r.completed_wait_ns
                        );
                        println!(
                            "synchronize on an idle queue: {:.1} ns (median)",
                            r.synchronize_idle_ns
                        );
                        println!(
                            "submit + wait, tiny dispatch: {:.1} µs (median)",
                            r.round_trip_us
                        );
                        println!(
                            "submit + .await, tiny:        {:.1} µs (median)",
                            r.async_round_trip_us
                        );
                        println!(
                            "4 KiB weight read during work: {:.2} µs (median), {} host waits, work still running: {}",
                            r.weight_read_during_work_us, r.weight_read_host_waits, r.weight_read_overlapped_work
                        );
                    })
                }
                other => Err(format!(
                    "unknown microbench {other:?}; try `dispatch` or `sync`"
                )),
            }
        }
        "generate" => llm::generate(&args, &open(opts)?),
        "bench" => llm::bench(&args, &open(opts)?),
        "graph" => llm::graph(&args, &open(opts)?),
        "profile" => llm::profile(&args, &open(opts)?),
        other => Err(format!("unknown command {other:?}\n\n{USAGE}")),
    };
    result
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(raw) {
        eprintln!("sluice: error: {e}");
        std::process::exit(1);
    }
}
