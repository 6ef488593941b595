//! `sluice bench`: llama-bench-like rows. `pp<N>` times the prefill of an N-token prompt
//! (the model's batched prefill API, [`Decoder::prefill`]), `tg<N>` times N greedy decode
//! steps queued back to back; each is repeated and reported as mean ± standard deviation
//! of tokens per second over the repetitions (llama-bench's avg_ts ± stddev_ts), after one
//! untimed warm-up run. The decode row's runtime counters come from its median run.

use std::time::Instant;

use serde::Serialize;
use sluice::Counters;

use crate::decode::Decoder;
use crate::error::LlmError;

/// A decode benchmark's figures (like llama-bench's `tg` row, plus runtime counters).
#[derive(Debug, Serialize)]
pub struct BenchReport {
    /// Device name.
    pub device: String,
    /// Model name.
    pub model: String,
    /// Weight dtype on the GPU.
    pub dtype: String,
    /// Direct or replay.
    pub mode: crate::decode::Mode,
    /// "auto", "barriers" or "persistent" (see `GpuOptions::lowering`).
    pub lowering: &'static str,
    /// Workgroups per persistent layer dispatch and the residency bound (when the model
    /// has the persistent lowering; `auto` uses it only at some positions).
    pub persistent: Option<crate::gpu::PersistentInfo>,
    /// Tokens already in the KV cache before timing.
    pub depth: usize,
    /// Decoded tokens timed.
    pub n: usize,
    /// Prompt processing speed (tokens/s, batched prefill) while filling `depth` (or one token).
    pub prefill_tok_s: f64,
    /// Decode tokens per second.
    pub decode_tok_s: f64,
    /// Milliseconds per decoded token.
    pub ms_per_token: f64,
    /// Dispatches recorded per token.
    pub dispatches_per_token: f64,
    /// Barriers per token (dataflow barriers and the submit's trailing one).
    pub barriers_per_token: f64,
    /// Host waits per token.
    pub host_waits_per_token: f64,
    /// Submits per token.
    pub submits_per_token: f64,
    /// Weight bytes read per token.
    pub weight_bytes: u64,
    /// Weight bytes per token times tokens per second, in GB/s.
    pub weight_gb_s: f64,
    /// CPU µs per token spent recording and submitting.
    pub cpu_record_submit_us_per_token: f64,
    /// CPU µs spent once capturing, scheduling and recording the step (replay mode).
    pub replay_record_once_us: f64,
}

/// Fills the KV cache to `depth` (batched prefill), then times `n` greedy decode steps
/// queued back to back.
pub fn bench(
    decoder: &Decoder<'_>,
    name: &str,
    dtype: &str,
    depth: usize,
    n: usize,
) -> Result<BenchReport, LlmError> {
    let filled = fill_cache(decoder, depth, n, &mut |_, _| {})?;
    bench_filled(decoder, name, dtype, &filled, n)
}

/// A KV cache filled for [`bench_filled`]: `pos` tokens of a fixed prompt, the greedy
/// token after them, and the prefill's rate.
struct Filled {
    depth: usize,
    pos: usize,
    token: u32,
    prefill_tok_s: f64,
}

/// Prefills a fixed prompt of `depth` tokens (at least one) for a timed run of `n` steps,
/// reporting the tokens done to `progress` ([`Decoder::prefill_with_progress`]).
fn fill_cache(
    decoder: &Decoder<'_>,
    depth: usize,
    n: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Filled, LlmError> {
    let model = decoder.model();
    if n == 0 {
        return Err(LlmError::InvalidArgument(
            "bench needs at least one token (n = 0 gives no rate)".into(),
        ));
    }
    if depth.saturating_add(n).saturating_add(2) > model.context() {
        return Err(LlmError::ContextFull {
            context: model.context(),
        });
    }
    let prompt = bench_prompt(depth.max(1), model.config().vocab as u32, 0);
    let t0 = Instant::now();
    let token = decoder.prefill_with_progress(&prompt, 0, progress)?;
    Ok(Filled {
        depth,
        pos: prompt.len(),
        token,
        prefill_tok_s: prompt.len() as f64 / t0.elapsed().as_secs_f64(),
    })
}

/// Times `n` greedy decode steps from a filled cache. A run writes the cache only from
/// `filled.pos` on, so runs from the same fill start from the same state.
fn bench_filled(
    decoder: &Decoder<'_>,
    name: &str,
    dtype: &str,
    filled: &Filled,
    n: usize,
) -> Result<BenchReport, LlmError> {
    let model = decoder.model();
    let device = model.device();
    let (token, pos) = (filled.token, filled.pos);
    // Warm-up step at this depth.
    decoder.run_greedy(token, pos, 1)?;
    decoder.set_params(token, pos)?;
    let before: Counters = device.counters();
    let t1 = Instant::now();
    let mut cpu = 0.0;
    for _ in 0..n {
        let c0 = Instant::now();
        decoder.submit_step()?;
        cpu += c0.elapsed().as_secs_f64();
    }
    let tokens = model.gpu_tokens(pos + 1, pos + 1 + n)?;
    let secs = t1.elapsed().as_secs_f64();
    debug_assert_eq!(tokens.len(), n);
    let d = device.counters().since(&before);
    let per = |v: u64| v as f64 / n as f64;
    let tok_s = n as f64 / secs;
    Ok(BenchReport {
        device: device.info().name.clone(),
        model: name.to_string(),
        dtype: dtype.to_string(),
        mode: decoder.mode(),
        lowering: model.lowering().name(),
        persistent: model.persistent_info(),
        depth: filled.depth,
        n,
        prefill_tok_s: filled.prefill_tok_s,
        decode_tok_s: tok_s,
        ms_per_token: secs * 1e3 / n as f64,
        dispatches_per_token: per(d.dispatches),
        barriers_per_token: per(d.barriers),
        host_waits_per_token: per(d.host_waits),
        submits_per_token: per(d.submits),
        weight_bytes: model.weight_bytes(),
        weight_gb_s: model.weight_bytes() as f64 * tok_s / 1e9,
        cpu_record_submit_us_per_token: cpu * 1e6 / n as f64,
        replay_record_once_us: decoder.record_us,
    })
}

/// What to benchmark (llama-bench's `-p`, `-n`, `-d`, `-r`).
#[derive(Clone, Copy, Debug)]
pub struct BenchParams {
    /// Prompt tokens of the `pp` row; 0: no `pp` row.
    pub prompt: usize,
    /// Generated tokens of the `tg` row; 0: no `tg` row.
    pub n: usize,
    /// Tokens already in the KV cache before each timed run.
    pub depth: usize,
    /// Timed repetitions per row (at least 1).
    pub repeat: usize,
}

/// One llama-bench-like row.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    /// `pp512`, `tg128`, with ` @ d<depth>` when the cache held tokens.
    pub test: String,
    /// Prompt tokens (pp rows).
    pub n_prompt: usize,
    /// Generated tokens (tg rows).
    pub n_gen: usize,
    /// Tokens in the KV cache before the timed run.
    pub depth: usize,
    /// Mean tokens per second over the repetitions.
    pub avg_ts: f64,
    /// Sample standard deviation of tokens per second (0 for one repetition).
    pub stddev_ts: f64,
    /// Tokens per second of every repetition.
    pub samples_ts: Vec<f64>,
}

/// Every row of one `sluice bench`, plus the median decode run's counters (the fields of
/// [`BenchReport`] at the top level, as before, when there is a `tg` row).
#[derive(Debug, Serialize)]
pub struct BenchSummary {
    /// Device name.
    pub device: String,
    /// Model name.
    pub model: String,
    /// Weight dtype on the GPU.
    pub dtype: String,
    /// The rows: `pp` first, then `tg`.
    pub rows: Vec<BenchRow>,
    /// The median decode run (by tok/s), when there is a `tg` row.
    #[serde(flatten)]
    pub decode: Option<BenchReport>,
}

/// Mean and sample standard deviation.
pub fn mean_stddev(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64;
    (mean, var.sqrt())
}

fn row(test: String, n_prompt: usize, n_gen: usize, depth: usize, samples: Vec<f64>) -> BenchRow {
    let (avg_ts, stddev_ts) = mean_stddev(&samples);
    BenchRow {
        test,
        n_prompt,
        n_gen,
        depth,
        avg_ts,
        stddev_ts,
        samples_ts: samples,
    }
}

fn depth_suffix(depth: usize) -> String {
    if depth > 0 {
        format!(" @ d{depth}")
    } else {
        String::new()
    }
}

/// Deterministic prompt tokens for benchmarks (spread over the vocabulary).
fn bench_prompt(len: usize, vocab: u32, salt: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(7919).wrapping_add(salt) + 1) % vocab.max(1))
        .collect()
}

/// Times the prefill of `params.prompt` tokens at position `params.depth` (the cache
/// filled to `depth` once first, its progress reported to `fill`), `repeat` times after a
/// warm-up; tokens per second each.
pub fn bench_prefill(
    decoder: &Decoder<'_>,
    params: &BenchParams,
    fill: &mut dyn FnMut(usize, usize),
) -> Result<Vec<f64>, LlmError> {
    let model = decoder.model();
    let (p, depth) = (params.prompt, params.depth);
    if p == 0 {
        return Err(LlmError::InvalidArgument(
            "pp row with 0 prompt tokens".into(),
        ));
    }
    if depth + p + 1 > model.context() {
        return Err(LlmError::ContextFull {
            context: model.context(),
        });
    }
    let vocab = model.config().vocab as u32;
    if depth > 0 {
        decoder.prefill_with_progress(&bench_prompt(depth, vocab, 0), 0, fill)?;
    }
    let prompt = bench_prompt(p, vocab, 17);
    decoder.prefill(&prompt, depth)?; // warm-up (pipelines, clocks)
    let mut samples = Vec::with_capacity(params.repeat.max(1));
    for _ in 0..params.repeat.max(1) {
        let t = Instant::now();
        decoder.prefill(&prompt, depth)?; // returns after the next token was read back
        samples.push(p as f64 / t.elapsed().as_secs_f64());
    }
    Ok(samples)
}

/// Runs the rows `params` asks for: `pp<prompt>` then `tg<n>` (each `repeat` times).
pub fn bench_suite(
    decoder: &Decoder<'_>,
    name: &str,
    dtype: &str,
    params: &BenchParams,
) -> Result<BenchSummary, LlmError> {
    bench_suite_with(decoder, name, dtype, params, &mut |_, _| {})
}

/// [`bench_suite`] reporting each fill of the KV cache to the depth (one per row) to
/// `fill` as `(tokens done, depth)` ([`Decoder::prefill_with_progress`]).
pub fn bench_suite_with(
    decoder: &Decoder<'_>,
    name: &str,
    dtype: &str,
    params: &BenchParams,
    fill: &mut dyn FnMut(usize, usize),
) -> Result<BenchSummary, LlmError> {
    if params.prompt == 0 && params.n == 0 {
        return Err(LlmError::InvalidArgument(
            "nothing to benchmark: give -p and/or -n above 0".into(),
        ));
    }
    let mut rows = Vec::new();
    if params.prompt > 0 {
        let samples = bench_prefill(decoder, params, fill)?;
        rows.push(row(
            format!("pp{}{}", params.prompt, depth_suffix(params.depth)),
            params.prompt,
            0,
            params.depth,
            samples,
        ));
    }
    let mut decode = None;
    if params.n > 0 {
        // The cache filled to the depth once, after the pp row's prompts, for the warm-up
        // and every timed run (a run writes only past the depth).
        let filled = fill_cache(decoder, params.depth, params.n, fill)?;
        bench_filled(decoder, name, dtype, &filled, params.n)?; // warm-up
        let mut runs = Vec::new();
        for _ in 0..params.repeat.max(1) {
            runs.push(bench_filled(decoder, name, dtype, &filled, params.n)?);
        }
        let samples: Vec<f64> = runs.iter().map(|r| r.decode_tok_s).collect();
        rows.push(row(
            format!("tg{}{}", params.n, depth_suffix(params.depth)),
            0,
            params.n,
            params.depth,
            samples,
        ));
        runs.sort_by(|a, b| a.decode_tok_s.total_cmp(&b.decode_tok_s));
        decode = Some(runs.swap_remove(runs.len() / 2));
    }
    Ok(BenchSummary {
        device: decoder.model().device().info().name.clone(),
        model: name.to_string(),
        dtype: dtype.to_string(),
        rows,
        decode,
    })
}

/// One row of the batched benchmark (like llama-batched-bench's: `sequences` prompts of
/// `prompt` tokens, then `n_gen` steps that each advance every sequence by one token).
#[derive(Clone, Debug, Serialize)]
pub struct BatchedRow {
    /// Sequences decoded together.
    pub sequences: usize,
    /// Prompt tokens per sequence.
    pub prompt: usize,
    /// Generated tokens per sequence.
    pub n_gen: usize,
    /// Prompt tokens per second over all sequences (prefilled one sequence after another,
    /// chunked).
    pub pp_tok_s: f64,
    /// Generated tokens per second over all sequences.
    pub tg_tok_s: f64,
    /// Mean milliseconds per batched step (= inter-token latency of every sequence).
    pub step_ms_mean: f64,
    /// Median milliseconds per step.
    pub step_ms_p50: f64,
    /// 99th percentile milliseconds per step.
    pub step_ms_p99: f64,
    /// Dispatches per step.
    pub dispatches_per_step: f64,
}

/// Value at quantile `q` (nearest rank) of `v` (sorted here).
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// Prefills `sequences` distinct prompts of `prompt` tokens into fresh slots, then runs
/// `n` greedy batched steps over all of them, timing each; frees the slots at the end.
pub fn bench_batched(
    runner: &mut crate::batch::BatchRunner<'_>,
    sequences: usize,
    prompt: usize,
    n: usize,
) -> Result<BatchedRow, LlmError> {
    if sequences == 0 || prompt == 0 || n == 0 {
        return Err(LlmError::InvalidArgument(
            "batched bench needs sequences, prompt and generated tokens above 0".into(),
        ));
    }
    if sequences > runner.max_rows() {
        return Err(LlmError::InvalidArgument(format!(
            "{sequences} sequences: the model takes {} rows per step",
            runner.max_rows()
        )));
    }
    let vocab = runner.model().config().vocab as u32;
    let device = runner.model().device().clone();
    let mut live = Vec::with_capacity(sequences); // (slot, token, pos)
    let result = (|| {
        let t0 = Instant::now();
        for i in 0..sequences {
            let slot = runner.open()?;
            live.push((slot, 0, prompt));
            let first = runner.prefill(slot, &bench_prompt(prompt, vocab, 101 * i as u32))?;
            live[i].1 = first.index;
        }
        let pp_secs = t0.elapsed().as_secs_f64();
        let before: Counters = device.counters();
        let mut steps = Vec::with_capacity(n);
        let t1 = Instant::now();
        for _ in 0..n {
            let ts = Instant::now();
            let res = runner.decode(&live)?;
            for (s, r) in live.iter_mut().zip(&res) {
                if r.nonfinite > 0 {
                    return Err(LlmError::NonFiniteLogits {
                        position: s.2,
                        count: r.nonfinite,
                    });
                }
                *s = (s.0, r.index, s.2 + 1);
            }
            steps.push(ts.elapsed().as_secs_f64() * 1e3);
        }
        let tg_secs = t1.elapsed().as_secs_f64();
        let d = device.counters().since(&before);
        let mean = steps.iter().sum::<f64>() / n as f64;
        Ok(BatchedRow {
            sequences,
            prompt,
            n_gen: n,
            pp_tok_s: (sequences * prompt) as f64 / pp_secs,
            tg_tok_s: (sequences * n) as f64 / tg_secs,
            step_ms_mean: mean,
            step_ms_p50: quantile(&mut steps, 0.5),
            step_ms_p99: quantile(&mut steps, 0.99),
            dispatches_per_step: d.dispatches as f64 / n as f64,
        })
    })();
    for (slot, _, _) in live {
        runner.close(slot);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(quantile(&mut v, 0.5), 50.0);
        assert_eq!(quantile(&mut v, 0.99), 99.0);
        assert_eq!(quantile(&mut [3.0], 0.99), 3.0);
        assert_eq!(quantile(&mut [], 0.5), 0.0);
    }

    #[test]
    fn mean_and_sample_stddev() {
        assert_eq!(mean_stddev(&[]), (0.0, 0.0));
        assert_eq!(mean_stddev(&[5.0]), (5.0, 0.0));
        let (m, s) = mean_stddev(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(m, 5.0);
        // Sample (n - 1) deviation: sqrt(32 / 7).
        assert!((s - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn row_names_follow_llama_bench() {
        let r = row(
            format!("pp512{}", depth_suffix(0)),
            512,
            0,
            0,
            vec![1.0, 3.0],
        );
        assert_eq!((r.test.as_str(), r.avg_ts), ("pp512", 2.0));
        assert_eq!(depth_suffix(4096), " @ d4096");
        let p = bench_prompt(5, 3, 0);
        assert!(p.iter().all(|&t| t < 3) && p.len() == 5);
    }
}
