use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use super::machine_limits::MachineLimits;
use super::phase_spans::{decode_only_rate, phase_secs, RequestTimes};
use entrobatch::{Decoding, Engine, EngineConfig, Event, GenerationParams, Prompt, Request, SamplingParams};

#[derive(Clone, Debug)]
pub struct ThroughputConfig {
    pub model: PathBuf,
    pub requests: usize,
    pub prompt_len: usize,
    pub output_len: usize,
    /// Sequences the engine runs at once (its `max_num_seqs`).
    pub concurrency: usize,
    /// Requests the sequential baseline runs (it is slow; its rate is per request, so a
    /// subset measures the same tokens/s). 0 skips it.
    pub baseline_requests: usize,
    pub engine: Option<EngineConfig>,
    /// How every request decodes (plain, MTI, ...); greedy sampling underneath.
    pub decoding: Decoding,
    /// Measure the machine's limits before and after the run and report the run against them.
    pub limits: bool,
    /// Prefill every prompt once, untimed, before the measured run (`warm_prefix_cache`).
    pub warm_prefix: bool,
}

/// How far a run has come, for a progress display.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Prompts through the untimed warm-up pass of `warm_prefix`.
    Warmed(usize),
    /// Measured requests finished.
    Finished(usize),
}

#[derive(Clone, Debug, Serialize)]
pub struct PhaseRates {
    /// Prompt tokens computed (not found in the prefix cache) over the time some request was
    /// waiting for its first token after admission (`phase_spans`).
    pub prefill_tokens_per_s: f64,
    /// Tokens after each request's first over the time some request was decoding; prefill
    /// chunks share those steps, so at high concurrency this is not a pure-decode rate.
    pub decode_tokens_per_s: f64,
    /// Tokens over the time every running request was decoding and no prompt waited
    /// (`phase_spans::decode_only_rate`): what steps without prompt rows deliver. None for the
    /// baseline, or when no time was decode-only.
    pub decode_only_tokens_per_s: Option<f64>,
    pub decode_only_secs: Option<f64>,
    /// Requests decoding in the decode-only window, averaged over its time: the rows of its
    /// steps, which fall below the concurrency as requests end.
    pub decode_only_mean_decoding: Option<f64>,
    pub output_tokens_per_s: f64,
    pub total_tokens_per_s: f64,
    pub wall_secs: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ThroughputReport {
    pub model: String,
    pub requests: usize,
    pub prompt_len: usize,
    pub output_len: usize,
    pub concurrency: usize,
    /// The engine's matmul mode and KV cache value type, as run.
    pub matmul_mode: String,
    pub kv_cache_dtype: String,
    pub engine: PhaseRates,
    pub baseline: Option<PhaseRates>,
    pub baseline_requests: usize,
    /// engine / baseline for output tokens per second.
    pub output_speedup: Option<f64>,
    pub total_speedup: Option<f64>,
    pub preemptions: u64,
    pub steps: u64,
    /// Prompt tokens the measured requests found in the prefix cache.
    pub prefix_cache_hit_tokens: u64,
    pub prompt_tokens: usize,
    pub decoding: Decoding,
    pub output_tokens: usize,
    /// Guided share of MTI tokens (the engine's MTI counters); None without MTI tokens.
    pub mti_trigger_rate: Option<f64>,
    /// CPU time of the whole process (all threads) over the timed section: on a shared
    /// machine it varies less with other tenants' load than wall time. 0 without /proc.
    pub cpu_secs: f64,
    /// Tokens per entropix branch; None without entropix tokens.
    pub entropix_branches: Option<std::collections::BTreeMap<String, usize>>,
    /// Speculative decoding: kept draft tokens over verified ones, and tokens each verifying
    /// forward gave a sequence (1 + kept per draft; vLLM's mean acceptance length). None
    /// without drafts.
    pub spec_acceptance_rate: Option<f64>,
    pub spec_tokens_per_forward: Option<f64>,
    /// The run against this machine's limits; None unless asked for.
    pub limits: Option<LimitFractions>,
    /// Whether the prompts were prefilled by an untimed pass first (`warm_prefix_cache`).
    pub warm_prefix: bool,
}

/// Rates of a run as fractions of what this machine can do (`machine_limits`).
#[derive(Clone, Debug, Serialize)]
pub struct LimitFractions {
    /// Bytes one decode row reads: every weight (the lm_head included) plus the KV of the
    /// mean decode context (`prompt_len + output_len / 2`).
    pub bytes_per_decode_row: usize,
    pub weight_bytes: usize,
    /// A parallel read of `bytes_per_decode_row` bytes, two streams per thread.
    pub read_gb_per_s: f64,
    /// Decode tok/s x bytes per row over the read bandwidth: what batch-1 decode is bound by.
    /// None above one sequence, where a step's reads are shared by its rows.
    pub bandwidth_fraction: Option<f64>,
    /// Operations (two per multiply-add) of the int8 projections over the run's wall time:
    /// every row through the layers, the sampled rows through the lm_head.
    pub int8_gops: f64,
    /// The int8 kernel's peak on weights in cache, per format, and weighted as the run's
    /// operations are.
    pub int8_peak_by_format: std::collections::BTreeMap<String, f64>,
    pub int8_peak_gops: f64,
    pub int8_fraction: f64,
    /// Share of the projections' multiply-adds the int8 kernel ran (the rest ran in candle).
    pub int8_share_of_macs: f64,
}

/// Deterministic prompts of `len` ordinary tokens, distinct per request so the prefix cache
/// cannot shortcut the measurement.
pub fn synthetic_prompts(vocab: usize, n: usize, len: usize) -> Vec<Vec<u32>> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    // Clear of the first and last 300 ids (special and byte tokens in real vocabularies), or
    // of a quarter at each end of a small one.
    let margin = 300u64.min(vocab as u64 / 4);
    let (lo, span) = (margin, (vocab as u64).saturating_sub(2 * margin).max(1));
    (0..n)
        .map(|_| {
            (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (lo + state % span) as u32
                })
                .collect()
        })
        .collect()
}

/// `--matmul` values: `int8` (the engine's default, batch-invariant, the fastest), `dense`
/// (f32 GEMM from 8 rows) or `quantized` (candle's kernels), for comparisons.
pub fn parse_matmul_mode(name: &str) -> std::result::Result<entrobatch::MatmulMode, String> {
    match name {
        "int8" => Ok(entrobatch::MatmulMode::Int8),
        "dense" => Ok(entrobatch::MatmulMode::DenseAbove { min_rows: 8 }),
        "quantized" => Ok(entrobatch::MatmulMode::Quantized),
        other => Err(format!("unknown matmul mode `{other}` (int8, dense or quantized)")),
    }
}

/// The engine configuration a throughput run uses, with the given matmul mode.
pub fn engine_config_with(model: &Path, mode: entrobatch::MatmulMode) -> EngineConfig {
    EngineConfig { matmul_mode: mode, ..EngineConfig::new(model) }
}

pub fn run(config: &ThroughputConfig, on_progress: impl FnMut(Progress)) -> Result<ThroughputReport> {
    run_with_prompts(config, None, on_progress)
}

/// `run` on the given prompts (`requests` of `prompt_len` tokens) instead of synthetic ones.
pub fn run_with_prompts(
    config: &ThroughputConfig,
    prompts: Option<&[Vec<u32>]>,
    mut on_progress: impl FnMut(Progress),
) -> Result<ThroughputReport> {
    let mut engine_config = config.engine.clone().unwrap_or_else(|| EngineConfig::new(&config.model));
    engine_config.max_num_seqs = config.concurrency;
    let matmul_mode = format!("{:?}", engine_config.matmul_mode);
    let kv_cache_dtype = format!("{:?}", engine_config.kv_cache_dtype());
    let engine = Engine::start(engine_config)?;
    let prompts = match prompts {
        Some(p) => p.to_vec(),
        None => synthetic_prompts(engine.info().model_config.vocab_size, config.requests, config.prompt_len),
    };
    let params = GenerationParams {
        sampling: SamplingParams::greedy(),
        max_tokens: config.output_len,
        ignore_eos: true,
        decoding: config.decoding.clone(),
        // Entropix tokens report their branch, for the branch distribution.
        return_metrics: matches!(config.decoding, Decoding::Entropix(_)),
        ..GenerationParams::default()
    };
    if config.warm_prefix {
        warm_prefix_cache(&engine, &prompts, &params, &mut on_progress)?;
    }
    let limits_before = config.limits.then(|| measure_limits(config, engine.info())).transpose()?;
    // Counters from here on are the measured run's, without a warm-up pass's.
    let counted = |m: &entrobatch::EngineMetrics| {
        [&m.steps, &m.preemptions, &m.prefix_cache_hits].map(|c| c.load(Ordering::Relaxed))
    };
    let at_start = counted(engine.metrics());
    let start = Instant::now();
    let cpu_start = process_cpu_secs();
    let handles = prompts
        .iter()
        .map(|p| engine.submit(Request::new(Prompt::TokenIds(p.clone()), params.clone())))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    // Each request's first-token and end times give the phases' spans (`phase_spans`). Each
    // handle is drained on its own thread: reading them one after another would see a later
    // request's first token only after the earlier requests finished.
    struct Drained {
        output_tokens: usize,
        times: RequestTimes,
        /// (seconds from the start, tokens) of each token event.
        arrivals: Vec<(f64, usize)>,
        branches: Vec<String>,
    }
    let drained: Vec<Result<Drained>> = std::thread::scope(|scope| {
        let workers: Vec<_> = handles
            .into_iter()
            .enumerate()
            .map(|(i, mut handle)| {
                scope.spawn(move || {
                    let times = RequestTimes { first_token: 0.0, end: 0.0 };
                    let mut d = Drained { output_tokens: 0, times, arrivals: Vec::new(), branches: Vec::new() };
                    while let Some(event) = handle.next_blocking() {
                        match event {
                            Event::Tokens { tokens, .. } => {
                                let at = start.elapsed().as_secs_f64();
                                if d.output_tokens == 0 && !tokens.is_empty() {
                                    d.times.first_token = at;
                                }
                                d.arrivals.push((at, tokens.len()));
                                d.output_tokens += tokens.len();
                                d.branches.extend(tokens.iter().filter_map(|t| t.metrics.as_ref()?.branch.clone()));
                            }
                            Event::Finished { error: Some(e), .. } => anyhow::bail!("request {i} failed: {e}"),
                            Event::Finished { .. } | Event::PromptLogprobs(_) => {}
                        }
                    }
                    d.times.end = start.elapsed().as_secs_f64();
                    Ok(d)
                })
            })
            .collect::<Vec<_>>();
        let mut reported = 0;
        loop {
            let finished = workers.iter().filter(|w| w.is_finished()).count();
            if finished > reported {
                reported = finished;
                on_progress(Progress::Finished(finished));
            }
            if finished == workers.len() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a benchmark reader thread panicked"))))
            .collect()
    });
    let mut output_tokens = 0usize;
    let mut branches = std::collections::BTreeMap::<String, usize>::new();
    let mut times = Vec::with_capacity(prompts.len());
    let mut arrivals = Vec::new();
    for d in drained {
        let d = d?;
        output_tokens += d.output_tokens;
        times.push(d.times);
        arrivals.extend(d.arrivals);
        for b in d.branches {
            *branches.entry(b).or_default() += 1;
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let cpu_secs = process_cpu_secs() - cpu_start;
    let metrics = engine.metrics();
    let at_end = counted(metrics);
    let [steps, preemptions, prefix_cache_hit_tokens] = std::array::from_fn(|i| at_end[i].saturating_sub(at_start[i]));
    let mti_trigger_rate = metrics.mti_trigger_rate();
    let spec_acceptance_rate = metrics.spec_decode.acceptance_rate();
    let spec_tokens_per_forward = metrics.spec_decode.tokens_per_forward();
    let info = engine.info().clone();
    engine.shutdown(entrobatch::ShutdownMode::Finish);
    let prompt_tokens: usize = prompts.iter().map(Vec::len).sum();
    // Prompt tokens the forwards ran; the rest came from the prefix cache.
    let computed_prompt_tokens = prompt_tokens.saturating_sub(prefix_cache_hit_tokens as usize);
    let (prefill_secs, decode_secs) = phase_secs(&times, config.concurrency);
    let decode_only = decode_only_rate(&times, config.concurrency, &arrivals);
    let engine_rates = PhaseRates {
        prefill_tokens_per_s: computed_prompt_tokens as f64 / prefill_secs.max(1e-9),
        decode_tokens_per_s: output_tokens.saturating_sub(times.len()) as f64 / decode_secs.max(1e-9),
        decode_only_tokens_per_s: decode_only.map(|d| d.tokens_per_s),
        decode_only_secs: decode_only.map(|d| d.secs),
        decode_only_mean_decoding: decode_only.map(|d| d.mean_decoding),
        output_tokens_per_s: output_tokens as f64 / wall,
        total_tokens_per_s: (prompt_tokens + output_tokens) as f64 / wall,
        wall_secs: wall,
    };
    let limits = match limits_before {
        Some(before) => {
            let limits = measure_limits(config, &info)?.best(&before);
            // Every output token is sampled from a row (a prompt's last, or a fed-back token's);
            // the other prompt rows only fill the cache.
            let rows =
                RowCounts { cache_only: computed_prompt_tokens.saturating_sub(times.len()), sampled: output_tokens };
            Some(limit_fractions(config, &info, &engine_rates, rows, &limits))
        }
        None => None,
    };
    let baseline = (config.baseline_requests > 0)
        .then(|| {
            baseline_rates(&config.model, &prompts[..config.baseline_requests.min(prompts.len())], config.output_len)
        })
        .transpose()?;
    Ok(ThroughputReport {
        model: display_name(&config.model),
        requests: config.requests,
        prompt_len: config.prompt_len,
        output_len: config.output_len,
        concurrency: config.concurrency,
        matmul_mode,
        kv_cache_dtype,
        output_speedup: baseline.as_ref().map(|b| engine_rates.output_tokens_per_s / b.output_tokens_per_s),
        total_speedup: baseline.as_ref().map(|b| engine_rates.total_tokens_per_s / b.total_tokens_per_s),
        engine: engine_rates,
        baseline,
        baseline_requests: config.baseline_requests,
        preemptions,
        steps,
        prefix_cache_hit_tokens,
        prompt_tokens,
        decoding: config.decoding.clone(),
        output_tokens,
        mti_trigger_rate,
        cpu_secs,
        spec_acceptance_rate,
        spec_tokens_per_forward,
        entropix_branches: (!branches.is_empty()).then_some(branches),
        limits,
        warm_prefix: config.warm_prefix,
    })
}

/// Runs every prompt once for a single token and waits for all of them, so that the measured
/// run finds each prompt's blocks in the prefix cache: its requests then start decoding within
/// a few steps of each other and its decode-only window is the whole batch decoding at the
/// prompts' context, which a cold run reaches only in its tail, as requests finish.
fn warm_prefix_cache(
    engine: &Engine,
    prompts: &[Vec<u32>],
    params: &GenerationParams,
    on_progress: &mut impl FnMut(Progress),
) -> Result<()> {
    let one_token = GenerationParams { max_tokens: 1, ..params.clone() };
    let handles = prompts
        .iter()
        .map(|p| engine.submit(Request::new(Prompt::TokenIds(p.clone()), one_token.clone())))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    for (i, mut handle) in handles.into_iter().enumerate() {
        while let Some(event) = handle.next_blocking() {
            if let Event::Finished { error: Some(e), .. } = event {
                anyhow::bail!("warm-up request {i} failed: {e}");
            }
        }
        on_progress(Progress::Warmed(i + 1));
    }
    Ok(())
}

/// Rows a run pushed through the projections: all of them through the layers, the sampled ones
/// also through the lm_head.
struct RowCounts {
    cache_only: usize,
    sampled: usize,
}

/// Bytes one decode row reads: every weight (the lm_head included) plus the KV of the mean
/// decode context.
fn bytes_per_decode_row(config: &ThroughputConfig, info: &entrobatch::EngineInfo) -> usize {
    let context = config.prompt_len + config.output_len / 2;
    let kv = entrobatch::model_runner::KvCache::bytes_read_per_row(&info.model_config, info.kv_cache_dtype, context);
    info.weights.bytes_per_token() + kv
}

fn measure_limits(config: &ThroughputConfig, info: &entrobatch::EngineInfo) -> Result<MachineLimits> {
    let formats = info.weights.projections.iter().filter_map(|p| p.int8_format);
    MachineLimits::measure(bytes_per_decode_row(config, info).max(1 << 20), formats)
}

fn limit_fractions(
    config: &ThroughputConfig,
    info: &entrobatch::EngineInfo,
    rates: &PhaseRates,
    rows: RowCounts,
    limits: &MachineLimits,
) -> LimitFractions {
    let weights = &info.weights;
    let bytes_per_decode_row = bytes_per_decode_row(config, info);
    // Per format: the run's operations and the time they would take at the kernel's peak.
    let (mut ops, mut secs_at_peak) = (0f64, 0f64);
    for &(format, peak) in &limits.int8_peak {
        let of_format = |p: &entrobatch::model_runner::ProjectionCost| p.int8_format == Some(format);
        let format_ops = 2.0 * weights.macs(rows.cache_only, rows.sampled, of_format) as f64;
        ops += format_ops;
        secs_at_peak += format_ops / peak;
    }
    let int8_peak_gops = if secs_at_peak > 0.0 { ops / secs_at_peak / 1e9 } else { 0.0 };
    let int8_gops = ops / rates.wall_secs.max(1e-9) / 1e9;
    let all_macs = weights.macs(rows.cache_only, rows.sampled, |_| true) as f64;
    LimitFractions {
        bytes_per_decode_row,
        weight_bytes: weights.bytes_per_token(),
        read_gb_per_s: limits.read_bytes_per_s / 1e9,
        bandwidth_fraction: (config.concurrency == 1)
            .then(|| rates.decode_tokens_per_s * bytes_per_decode_row as f64 / limits.read_bytes_per_s),
        int8_gops,
        int8_peak_by_format: limits.int8_peak.iter().map(|(f, p)| (format!("{f:?}"), p / 1e9)).collect(),
        int8_peak_gops,
        int8_fraction: if int8_peak_gops > 0.0 { int8_gops / int8_peak_gops } else { 0.0 },
        int8_share_of_macs: if all_macs > 0.0 { ops / 2.0 / all_macs } else { 0.0 },
    }
}

fn baseline_rates(model: &Path, prompts: &[Vec<u32>], output_len: usize) -> Result<PhaseRates> {
    let t = super::baseline::run_sequential(model, prompts, output_len)?;
    let wall = t.prefill_secs + t.decode_secs;
    Ok(PhaseRates {
        prefill_tokens_per_s: t.prompt_tokens as f64 / t.prefill_secs.max(1e-9),
        decode_tokens_per_s: (t.output_tokens - prompts.len()) as f64 / t.decode_secs.max(1e-9),
        decode_only_tokens_per_s: None,
        decode_only_secs: None,
        decode_only_mean_decoding: None,
        output_tokens_per_s: t.output_tokens as f64 / wall,
        total_tokens_per_s: (t.prompt_tokens + t.output_tokens) as f64 / wall,
        wall_secs: wall,
    })
}

/// User + system CPU seconds of this process, all threads (Linux `/proc/self/stat`, in
/// USER_HZ = 100 ticks); 0 elsewhere.
pub fn process_cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { return 0.0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

fn display_name(path: &Path) -> String {
    path.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

/// A short fixed-width table of a report, engine against baseline.
pub fn render_table(r: &ThroughputReport) -> String {
    let mut out = format!(
        "{} | {} requests x ({} in + {} out), concurrency {} | {} matmul, {} KV cache\n{:<22}{:>12}{:>12}{:>12}{:>12}\n",
        r.model, r.requests, r.prompt_len, r.output_len, r.concurrency, r.matmul_mode, r.kv_cache_dtype,
        "system", "prefill t/s", "decode t/s", "output t/s", "total t/s"
    );
    let mut row = |name: &str, p: &PhaseRates| {
        out.push_str(&format!(
            "{:<22}{:>12.1}{:>12.1}{:>12.1}{:>12.1}\n",
            name, p.prefill_tokens_per_s, p.decode_tokens_per_s, p.output_tokens_per_s, p.total_tokens_per_s
        ));
    };
    row("entrobatch", &r.engine);
    if let Some(b) = &r.baseline {
        row("candle sequential", b);
    }
    if let (Some(rate), Some(secs), Some(rows), true) = (
        r.engine.decode_only_tokens_per_s,
        r.engine.decode_only_secs,
        r.engine.decode_only_mean_decoding,
        r.concurrency > 1,
    ) {
        out.push_str(&format!(
            "decode-only steps (no prompt waiting): {rate:.1} t/s over {secs:.1} s, {rows:.1} requests decoding on average\n"
        ));
    }
    if r.warm_prefix {
        out.push_str(&format!(
            "prompts prefilled by an untimed warm-up pass: {} of the {} prompt tokens were prefix-cache hits\n",
            r.prefix_cache_hit_tokens, r.prompt_tokens
        ));
    }
    if let (Some(o), Some(t)) = (r.output_speedup, r.total_speedup) {
        out.push_str(&format!("speedup: output {o:.2}x, total {t:.2}x\n"));
    }
    if let Some(l) = &r.limits {
        out.push_str(&format!(
            "limits: {:.1} MiB a decode row ({:.1} MiB weights) read at {:.1} GB/s{}\n",
            l.bytes_per_decode_row as f64 / (1 << 20) as f64,
            l.weight_bytes as f64 / (1 << 20) as f64,
            l.read_gb_per_s,
            l.bandwidth_fraction.map_or(String::new(), |f| format!(": batch-1 decode at {:.0}% of it", 100.0 * f)),
        ));
        out.push_str(&format!(
            "        int8 projections {:.1} Gop/s over the run, kernel peak {:.1}: {:.0}%\n",
            l.int8_gops,
            l.int8_peak_gops,
            100.0 * l.int8_fraction
        ));
    }
    if let (Some(rate), Some(per_forward)) = (r.spec_acceptance_rate, r.spec_tokens_per_forward) {
        out.push_str(&format!(
            "speculation: {:.1}% of draft tokens kept, {per_forward:.2} tokens per verifying forward\n",
            100.0 * rate
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::synthetic_prompts;

    #[test]
    fn synthetic_prompts_differ_from_their_first_block_on_small_vocabularies_too() {
        for vocab in [320, 49_152, 151_936] {
            let prompts = synthetic_prompts(vocab, 8, 64);
            let margin = 300.min(vocab / 4) as u32;
            for p in &prompts {
                assert_eq!(p.len(), 64);
                assert!(p.iter().all(|&t| t >= margin && t < vocab as u32 - margin), "vocab {vocab}: {p:?}");
            }
            let firsts: std::collections::HashSet<&[u32]> = prompts.iter().map(|p| &p[..16]).collect();
            assert_eq!(firsts.len(), prompts.len(), "vocab {vocab}: two prompts share their first block");
        }
    }
}
