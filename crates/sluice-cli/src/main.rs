//! The `sluice` command line (clap): `info`, `demo`, `microbench`, `generate`, `bench`,
//! `graph`, `profile`.
//!
//! Adding a subcommand: a module with a `#[derive(clap::Args)]` struct and a `run`
//! function, one variant in [`Command`] and one arm in [`run`].

#![deny(clippy::undocumented_unsafe_blocks)]

#[macro_use]
mod out;
mod chat;
mod demo;
mod info;
mod llm;
mod logger;
mod microbench;
mod render;
mod serve;
mod tokenize;

use clap::{Args, Parser, Subcommand, ValueEnum};
use sluice::{BarrierMode, Device, Options, Validation};

/// sluice — Vulkan runtime for LLM decode.
#[derive(Parser, Debug)]
#[command(name = "sluice", version, about = "sluice — Vulkan runtime for LLM decode", long_about = None)]
#[command(propagate_version = true, max_term_width = 100)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Command,
}

/// Options every subcommand takes.
#[derive(Args, Debug)]
struct Common {
    /// Use the first device whose name contains NAME
    #[arg(long, global = true, value_name = "NAME")]
    adapter: Option<String>,
    /// A barrier between every two dispatches (A/B against Auto)
    #[arg(long, global = true)]
    serial: bool,
    /// Enable the Khronos validation layer with synchronization validation; messages are
    /// printed at the end
    #[arg(long, global = true)]
    validate: bool,
    /// Do not use cooperative matrices (matrix units) even where the device has them
    #[arg(long, global = true)]
    no_coopmat: bool,
    /// Do not use integer dot products (the block-format matvecs decode to f32 instead)
    #[arg(long, global = true)]
    no_int_dot: bool,
    /// Do not build the weights' matrix-unit operands in registers (the batched engine's
    /// matvecs stage them through shared memory instead)
    #[arg(long, global = true)]
    no_register_operands: bool,
    /// Do not run a prompt chunk's f16 matrices as 128 x 128 matrix-unit tiles staged
    /// through shared memory (the register-built matvecs run instead)
    #[arg(long, global = true)]
    no_tiled_matmul: bool,
    /// Bind at most this many bytes at once, below the device's maxStorageBufferRange: runs
    /// what a device with a smaller limit runs (tables larger than it split over bindings)
    #[arg(long, global = true, value_name = "BYTES")]
    max_binding: Option<u64>,
    /// More log output on stderr (-v info, -vv debug: runtime decisions, -vvv trace)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// The subcommands. New ones (tokenize, chat, serve, inspect) go here, each with its module.
#[derive(Subcommand, Debug)]
enum Command {
    /// The chosen Vulkan device: name, driver, API, UMA, heaps with budgets, subgroup size;
    /// with --kernels, the driver's compile statistics of the kernels (registers, ...)
    Info(info::InfoArgs),
    /// 100 small dispatches in Auto and Serial barrier mode, checked against the CPU
    Demo(JsonArg),
    /// GPU µs per tiny dispatch (dependent vs independent) or host wait costs
    Microbench(MicrobenchArgs),
    /// Generate text or token ids from a prompt
    Generate(llm::GenerateArgs),
    /// llama-bench-like row: tok/s, ms/token, dispatches, barriers, GB/s
    Bench(llm::BenchArgs),
    /// The captured decode step: nodes, edges, concurrent groups, barriers
    Graph(llm::GraphArgs),
    /// Perfetto trace, SVG timeline, per-op and per-layer tables of one decode step
    Profile(llm::ProfileArgs),
    /// A multi-turn chat through the model's chat template (keeps the KV cache)
    Chat(chat::ChatArgs),
    /// Token ids and pieces of a text (GGUF vocabulary or tokenizer.json; no GPU needed)
    Tokenize(tokenize::TokenizeArgs),
    /// A GGUF file's architecture, sizes, tensor-type histogram and bytes per format (no GPU)
    Inspect(InspectArgs),
    /// OpenAI-compatible HTTP server (chat/completions, completions, models, health, metrics)
    Serve(serve::ServeArgs),
    /// Load generator for `sluice serve`: aggregate tok/s, time to first token, inter-token latency
    Loadgen(serve::LoadgenArgs),
}

/// `sluice inspect` options.
#[derive(Args, Debug)]
struct InspectArgs {
    /// The GGUF file
    #[arg(long, value_name = "FILE")]
    model: std::path::PathBuf,
}

/// `--json` alone.
#[derive(Args, Debug)]
struct JsonArg {
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum Microbench {
    /// GPU µs per tiny dispatch, dependent chain vs independent
    Dispatch,
    /// Host wait costs
    Sync,
}

#[derive(Args, Debug)]
struct MicrobenchArgs {
    /// Which microbenchmark
    which: Microbench,
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
    /// Dispatches per run (dispatch)
    #[arg(short = 'n', default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    n: u32,
    /// Runs; the median is reported (dispatch)
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: u32,
}

fn options(c: &Common) -> Options {
    Options {
        adapter: c.adapter.clone(),
        barriers: if c.serial {
            BarrierMode::Serial
        } else {
            BarrierMode::Auto
        },
        validation: if c.validate {
            Validation::Synchronization
        } else {
            Validation::Off
        },
        no_coopmat: c.no_coopmat,
        no_int_dot: c.no_int_dot,
        no_register_operands: c.no_register_operands,
        no_tiled_matmul: c.no_tiled_matmul,
        max_binding: c.max_binding,
        ..Options::default()
    }
}

/// Prints `value` as pretty JSON or through `table`.
fn print<T: serde::Serialize>(
    value: &T,
    json: bool,
    table: impl FnOnce(&T) -> Result<(), String>,
) -> Result<(), String> {
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(value).map_err(|e| e.to_string())?
        )
    } else {
        table(value)
    }
}

fn demo(device: &Device, json: bool) -> Result<(), String> {
    let report = demo::run(device).map_err(|e| e.to_string())?;
    print(&report, json, |r| {
        outln!("device: {}", r.device)?;
        outln!(
            "{:<8} {:>10} {:>9} {:>8}",
            "mode",
            "dispatches",
            "barriers",
            "elided"
        )?;
        for (name, m) in [("auto", &r.auto), ("serial", &r.serial)] {
            outln!(
                "{name:<8} {:>10} {:>9} {:>8}",
                m.dispatches,
                m.barriers,
                m.barriers_elided
            )?;
        }
        outln!(
            "results match CPU: {}; auto equals serial: {}",
            r.results_match_cpu,
            r.auto_equals_serial
        )
    })?;
    let messages = device.validation_messages();
    if !messages.is_empty() {
        return Err(format!("{} validation message(s)", messages.len()));
    }
    if !(report.results_match_cpu && report.auto_equals_serial) {
        return Err("results differ".into());
    }
    Ok(())
}

fn microbench(device: &Device, a: &MicrobenchArgs) -> Result<(), String> {
    match a.which {
        Microbench::Dispatch => {
            let r = microbench::dispatch(device, a.n, a.runs).map_err(|e| e.to_string())?;
            print(&r, a.json, |r| {
                outln!(
                    "device: {}  ({} dispatches, median of {} runs)",
                    r.device,
                    r.dispatches,
                    r.runs
                )?;
                outln!(
                    "dependent chain:  {:.3} µs GPU per dispatch ({} barriers)",
                    r.chain_gpu_us_per_dispatch,
                    r.chain_barriers
                )?;
                outln!(
                    "independent:      {:.3} µs GPU per dispatch ({} barriers)",
                    r.independent_gpu_us_per_dispatch,
                    r.independent_barriers
                )?;
                outln!(
                    "recording:        {:.3} µs CPU per dispatch",
                    r.record_cpu_us_per_dispatch
                )
            })
        }
        Microbench::Sync => {
            let r = microbench::sync(device).map_err(|e| e.to_string())?;
            print(&r, a.json, |r| {
                outln!("device: {}", r.device)?;
                outln!(
                    "wait on a completed ticket:   {:.1} ns (median)",
                    r.completed_wait_ns
                )?;
                outln!(
                    "synchronize on an idle queue: {:.1} ns (median)",
                    r.synchronize_idle_ns
                )?;
                outln!(
                    "submit + wait, tiny dispatch: {:.1} µs (median)",
                    r.round_trip_us
                )?;
                outln!(
                    "submit + .await, tiny:        {:.1} µs (median)",
                    r.async_round_trip_us
                )?;
                outln!(
                    "4 KiB weight read during work: {:.2} µs (median), {} host waits, work still running: {}",
                    r.weight_read_during_work_us, r.weight_read_host_waits, r.weight_read_overlapped_work
                )
            })
        }
    }
}

/// Runs the parsed command on a freshly opened device; validation messages (with
/// `--validate`) are printed to stderr at the end, also when the command failed.
fn run(cli: Cli) -> Result<(), String> {
    // Commands that need no device.
    match &cli.command {
        Command::Tokenize(a) => return tokenize::run(a).and_then(|()| out::flush()),
        Command::Inspect(a) => {
            let file = sluice_llm::gguf::GgufFile::open(&a.model).map_err(|e| e.to_string())?;
            outln!("{}", sluice_llm::gguf_model::summary(&file))?;
            return out::flush();
        }
        // The server opens its own device on its engine thread.
        Command::Serve(a) => return serve::run(a, options(&cli.common)),
        Command::Loadgen(a) => return serve::loadgen(a),
        _ => {}
    }
    let mut opts = options(&cli.common);
    if let Command::Info(a) = &cli.command {
        opts.kernel_statistics = a.kernels.is_some();
    }
    let validate = cli.common.validate;
    let device = Device::new(opts).map_err(|e| e.to_string())?;
    log::debug!(
        "device {} ({}), {:?} barriers",
        device.info().name,
        device.info().device_type,
        device.options().barriers
    );
    let result = match &cli.command {
        Command::Info(a) => info::run(&device, a),
        Command::Demo(a) => demo(&device, a.json),
        Command::Microbench(a) => microbench(&device, a),
        Command::Generate(a) => llm::generate(a, &device),
        Command::Bench(a) => llm::bench(a, &device),
        Command::Graph(a) => llm::graph(a, &device),
        Command::Profile(a) => llm::profile(a, &device),
        Command::Chat(a) => chat::run(a, &device),
        Command::Tokenize(a) => tokenize::run(a),
        Command::Serve(_) | Command::Loadgen(_) | Command::Inspect(_) => {
            unreachable!("handled before the device")
        }
    };
    let result = result.and_then(|()| out::flush());
    if validate {
        report_validation(&device);
    }
    result
}

/// Prints the collected validation messages (count, then one per line) to stderr.
fn report_validation(device: &Device) {
    use std::io::Write;
    let messages = device.validation_messages();
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "validation: {} message(s)", messages.len());
    for m in &messages {
        let _ = writeln!(err, "  [{}] {}: {}", m.severity, m.id, m.text);
    }
}

/// Reads the command line; non-UTF-8 arguments and usage errors become clap's messages.
fn parse() -> Cli {
    use clap::error::ErrorKind;
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let text = e.render().to_string();
            let code = match e.kind() {
                ErrorKind::DisplayHelp
                | ErrorKind::DisplayVersion
                | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    // Help asked for (or no subcommand): stdout, exit 0 unless stdout fails.
                    if let Err(msg) = out!("{text}").and_then(|()| out::flush()) {
                        eprint_quiet(&format!("sluice: error: {msg}\n"));
                        std::process::exit(1);
                    }
                    0
                }
                _ => {
                    eprint_quiet(&text);
                    2
                }
            };
            std::process::exit(code);
        }
    }
}

/// Writes to stderr, ignoring errors (nowhere left to report them).
fn eprint_quiet(text: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

fn main() {
    // A bug must still end with a one-line message, not a backtrace dump.
    std::panic::set_hook(Box::new(|info| {
        eprint_quiet(&format!(
            "sluice: internal error (a bug, please report): {info}\n"
        ));
    }));
    let cli = parse();
    logger::init(cli.common.verbose);
    if let Err(e) = run(cli) {
        eprint_quiet(&format!("sluice: error: {e}\n"));
        std::process::exit(1);
    }
}
