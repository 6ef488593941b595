//! `sluice generate | bench | graph | profile`: the model commands.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use sluice::graph::GraphOptions;
use sluice::profile::{chrome_trace, idle_ns, op_table, timeline_svg, CpuSpan};
use sluice::Device;
use sluice_llm::decode::{Decoder, Mode};
use sluice_llm::load::{open_model, LoadOptions};
use sluice_llm::sampler::Sampling;

use crate::args::Args;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Shared model options: `--model`, `--mode`, `--context`, `--dtype`, `--no-fuse`, `--no-reorder`, `--lookahead`.
struct ModelArgs {
    model: String,
    mode: Mode,
    load: LoadOptions,
    graph: GraphOptions,
}

fn model_args(args: &Args, device: &Device, default_context: usize) -> Result<ModelArgs, String> {
    let model = match args.value("model") {
        Some(m) => m.to_string(),
        None => sluice_llm::load::default_model(device).to_string(),
    };
    let mode: Mode = args.value("mode").unwrap_or("replay").parse()?;
    let mut load = LoadOptions::default();
    load.gpu.context = args.parsed("context", default_context)?;
    load.gpu.attention_chunk = args.parsed("attention-chunk", load.gpu.attention_chunk)?;
    load.gpu.prefill_chunk = args.parsed("prefill-chunk", load.gpu.prefill_chunk)?.max(1);
    load.gpu.matvec_threads_per_row = args
        .value("matvec-tpr")
        .map(|v| v.parse().map_err(|_| format!("--matvec-tpr {v:?}")))
        .transpose()?;
    if let Some(dt) = args.value("dtype") {
        load.dtype = Some(sluice_kernels::WeightDtype::from_name(dt).ok_or_else(|| {
            format!("--dtype {dt:?}: use f16, bf16, f32, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k or q6_k")
        })?);
    }
    load.gpu.fuse_gate_up = !args.flag("no-fuse");
    load.gpu.fuse_norm = !args.flag("no-fuse");
    load.gpu.fuse_attention = !args.flag("no-fuse");
    let graph = GraphOptions {
        reorder: !args.flag("no-reorder"),
        lookahead: args.parsed("lookahead", 64)?,
    };
    Ok(ModelArgs {
        model,
        mode,
        load,
        graph,
    })
}

fn progress(quiet: bool) -> impl FnMut(u64, u64) {
    use std::io::IsTerminal;
    let mut last = 0u64;
    let start = Instant::now();
    // A live bar on a terminal; in logs only the final line.
    let live = std::io::stderr().is_terminal();
    move |done, total| {
        if quiet || total == 0 || (!live && done < total) {
            return;
        }
        let pct = done * 100 / total;
        if pct >= last + 5 || done == total {
            last = pct;
            eprint!(
                "\rloading weights: {:>3}% ({:.2} / {:.2} GB, {:.1} s)",
                pct,
                done as f64 / 1e9,
                total as f64 / 1e9,
                start.elapsed().as_secs_f64()
            );
            if done == total {
                eprintln!();
            }
        }
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
pub fn generate(args: &Args, device: &Device) -> Result<(), String> {
    let json = args.flag("json");
    let m = model_args(args, device, 4352)?;
    let n: usize = args.parsed("n", 32)?;
    let sampling = Sampling {
        temperature: args.parsed("temperature", 0.0)?,
        top_k: args.parsed("top-k", 0)?,
        top_p: args.parsed("top-p", 1.0)?,
        seed: args.parsed("seed", 0)?,
    };
    let mut m = m;
    if !sampling.is_greedy() {
        m.load.gpu.sampling = Some(sampling);
    }
    let logits_out = args.value("logits-out").map(PathBuf::from);
    let prompt_text = args.value("prompt").map(str::to_string);
    let prompt_ids = args.value("prompt-ids").map(parse_ids).transpose()?;
    args.finish()?;
    let loaded = open_model(device, &m.model, &m.load, progress(json)).map_err(err)?;
    let prompt = match (prompt_ids, &prompt_text, &loaded.tokenizer) {
        (Some(ids), _, _) => ids,
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
    let mut out = std::io::stdout();
    let mut first_logits_done = false;
    let result = sluice_llm::run::generate(&decoder, &prompt, n, &sampling, |t| {
        if stream {
            match tok {
                Some(tk) => {
                    let _ = write!(out, "{}", tk.decode(&[t], true).unwrap_or_default());
                }
                None => {
                    let _ = write!(out, "{t} ");
                }
            }
            let _ = out.flush();
        }
        first_logits_done = true;
    })
    .map_err(err)?;
    if let Some(path) = logits_out {
        // The logits after the prompt: recompute that step (the cache is reset by rewriting it).
        let logits = sluice_llm::run::prompt_logits(&decoder, &prompt).map_err(err)?;
        let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if json {
        println!("{}", serde_json::to_string(&result).map_err(err)?);
    } else {
        println!();
        eprintln!(
            "{} tokens, {:.1} tok/s decode, {:.1} tok/s prompt",
            result.tokens.len(),
            result.tok_s,
            result.prefill_tok_s
        );
    }
    Ok(())
}

/// `sluice bench`.
pub fn bench(args: &Args, device: &Device) -> Result<(), String> {
    let json = args.flag("json");
    let n: usize = args.parsed("n", 128)?;
    let depth: usize = args.parsed("depth", 0)?;
    let repeats: usize = args.parsed("repeat", 1)?;
    let m = model_args(args, device, depth + n + 64)?;
    args.finish()?;
    let loaded = open_model(device, &m.model, &m.load, progress(json)).map_err(err)?;
    let decoder = Decoder::new(&loaded.model, m.mode, m.graph).map_err(err)?;
    let mut reports = Vec::new();
    for _ in 0..repeats.max(1) {
        reports.push(
            sluice_llm::run::bench(&decoder, &m.model, &loaded.dtype, depth, n).map_err(err)?,
        );
    }
    reports.sort_by(|a, b| a.decode_tok_s.total_cmp(&b.decode_tok_s));
    let r = &reports[reports.len() / 2];
    if json {
        println!("{}", serde_json::to_string_pretty(r).map_err(err)?);
        return Ok(());
    }
    println!("| model | device | dtype | mode | test | tok/s | ms/tok | disp/tok | barriers/tok | waits/tok | weights GB | GB/s | CPU µs/tok |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {:?} | tg{}{} | {:.1} | {:.3} | {:.0} | {:.0} | {:.2} | {:.3} | {:.0} | {:.1} |",
        r.model,
        r.device,
        r.dtype,
        r.mode,
        r.n,
        if r.depth > 0 { format!(" @ d{}", r.depth) } else { String::new() },
        r.decode_tok_s,
        r.ms_per_token,
        r.dispatches_per_token,
        r.barriers_per_token,
        r.host_waits_per_token,
        r.weight_bytes as f64 / 1e9,
        r.weight_gb_s,
        r.cpu_record_submit_us_per_token
    );
    if repeats > 1 {
        let all: Vec<String> = reports
            .iter()
            .map(|r| format!("{:.1}", r.decode_tok_s))
            .collect();
        println!("(median of {} runs: {})", repeats, all.join(", "));
    }
    Ok(())
}

/// `sluice graph --dump text|json`.
pub fn graph(args: &Args, device: &Device) -> Result<(), String> {
    let dump = args.value("dump").unwrap_or("text").to_string();
    let m = model_args(args, device, 512)?;
    args.finish()?;
    let loaded = open_model(device, &m.model, &m.load, progress(true)).map_err(err)?;
    let g = Decoder::graph(&loaded.model, m.graph).map_err(err)?;
    match dump.as_str() {
        "text" => print!("{}", g.dump_text()),
        "json" => println!("{}", serde_json::to_string_pretty(&g.dump()).map_err(err)?),
        other => return Err(format!("--dump {other:?}: use text or json")),
    }
    Ok(())
}

/// `sluice profile --out DIR`.
pub fn profile(args: &Args, device: &Device) -> Result<(), String> {
    let out = PathBuf::from(args.value("out").unwrap_or("profile"));
    let n: usize = args.parsed("n", 16)?;
    let m = model_args(args, device, n + 64)?;
    args.finish()?;
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let loaded = open_model(device, &m.model, &m.load, progress(false)).map_err(err)?;
    let model = &loaded.model;
    let t0 = Instant::now();
    let ns = |t: Instant| t.duration_since(t0).as_secs_f64() * 1e9;
    let mut cpu = Vec::new();
    let r0 = Instant::now();
    let graph = Decoder::graph(model, m.graph).map_err(err)?;
    let replay = graph.record_with(true).map_err(err)?;
    cpu.push(CpuSpan {
        name: "capture+schedule+record (once)".into(),
        begin_ns: ns(r0),
        dur_ns: r0.elapsed().as_secs_f64() * 1e9,
    });
    model.set_params(1, 0).map_err(err)?;
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
    // Bytes: weights a dispatch reads (matvec and embedding ops).
    let nodes = graph.nodes();
    let bytes = |i: usize| -> Option<u64> {
        let w: u64 = nodes[i]
            .bindings
            .iter()
            .filter(|(b, _, _)| {
                b.class() == sluice::ResourceClass::ReadOnlyWeight && b.size() > 1 << 16
            })
            .map(|(_, _, l)| *l)
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
    let mut table = String::new();
    table += &format!(
        "{title}: one token (last of {n}), profiled replay (timestamps around every dispatch)\n\n"
    );
    table += "| op | count/token | GPU µs/token | share | weight GB/s |\n|---|---|---|---|---|\n";
    for o in &ops {
        table += &format!(
            "| {} | {} | {:.1} | {:.1}% | {} |\n",
            o.op,
            o.count,
            o.gpu_us,
            o.share * 100.0,
            o.gb_s
                .map(|g| format!("{g:.0}"))
                .unwrap_or_else(|| "-".into())
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
    print!("{table}");
    eprintln!(
        "wrote {}/trace.json, timeline.svg, table.md, ops.json",
        out.display()
    );
    Ok(())
}
