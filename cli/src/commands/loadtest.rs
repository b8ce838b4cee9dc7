//! `entrobatch loadtest`: load-tests a running server on this machine.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use entrobatch_loadtest as loadtest;
use loadtest::{Lengths, LoadTestConfig, LoadTestReport, Slo};

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("traffic").required(true).multiple(true).args(["rate", "concurrency", "sweep"])))]
pub struct LoadTestArgs {
    /// The server (loopback only: 127.0.0.0/8, localhost, [::1]).
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub url: String,
    #[arg(long, default_value_t = 100)]
    pub requests: usize,
    /// Poisson arrival rate in requests/s.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Requests in flight at once (caps --rate when both are given).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Prompt length in (approximate) tokens.
    #[arg(long, default_value_t = 32)]
    pub prompt_len: usize,
    /// Output tokens per request (sent with ignore_eos).
    #[arg(long, default_value_t = 32)]
    pub output_len: usize,
    /// Vary lengths: draw each prompt and output length from a log-normal whose medians are
    /// --prompt-len and --output-len and whose ln has this standard deviation (ShareGPT's
    /// lengths are close to 1.0). Default: fixed lengths.
    #[arg(long)]
    pub length_sigma: Option<f64>,
    /// Multi-turn chat: each session sends this many /v1/chat/completions turns, one after
    /// the other, each resending the conversation so far (with X-Session-Id per conversation).
    #[arg(long, default_value_t = 1)]
    pub turns: usize,
    /// Seconds after which nothing more is sent and running requests are cut off.
    #[arg(long, default_value_t = 300.0)]
    pub duration_limit: f64,
    /// Latency targets for goodput, e.g. `--goodput ttft:500 tpot:50 e2el:5000` (ms).
    #[arg(long, num_args = 1..)]
    pub goodput: Vec<String>,
    /// Write the full report (summary and per-request outcomes) as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// With --sweep: the SVG chart of output throughput and p99 TTFT against rate.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Run once per rate, e.g. `--sweep 1,2,4,8`.
    #[arg(long, value_delimiter = ',')]
    pub sweep: Vec<f64>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The `model` field sent; default: left out (the server's model).
    #[arg(long)]
    pub model: Option<String>,
    /// Send `X-Session-Id: s{i % N}` with request i (for a balancer with session affinity).
    #[arg(long)]
    pub sessions: Option<usize>,
    #[arg(long)]
    pub no_progress: bool,
}

pub fn run(args: LoadTestArgs) -> Result<()> {
    let slo = Slo::parse(&args.goodput).map_err(|e| anyhow::anyhow!("--goodput: {e}"))?;
    if !(args.duration_limit.is_finite() && args.duration_limit > 0.0) {
        bail!("--duration-limit must be a positive number of seconds");
    }
    if args.sessions == Some(0) {
        bail!("--sessions must be at least 1 (leave it out to send no X-Session-Id)");
    }
    if args.sessions.is_some() && args.turns > 1 {
        bail!("--sessions applies to single-turn requests; with --turns each conversation is its own session");
    }
    if args.plot.is_some() && args.sweep.is_empty() {
        bail!("--plot draws a --sweep; pass --sweep R1,R2,...");
    }
    let config = LoadTestConfig {
        url: args.url.clone(),
        requests: args.requests,
        rate: args.rate,
        concurrency: args.concurrency,
        prompt_len: args.prompt_len,
        output_len: args.output_len,
        lengths: args.length_sigma.map_or(Lengths::Fixed, |sigma| Lengths::LogNormal { sigma }),
        turns: args.turns,
        duration_limit: Duration::from_secs_f64(args.duration_limit),
        slo,
        seed: args.seed,
        model: args.model.clone(),
        sessions: args.sessions,
        progress: !args.no_progress,
    };
    // Refuse a non-loopback target before starting anything.
    loadtest::Target::parse(&config.url)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let reports: Vec<LoadTestReport> = if args.sweep.is_empty() {
        vec![runtime.block_on(loadtest::run(&config))?]
    } else {
        runtime.block_on(loadtest::sweep(&config, &args.sweep))?
    };
    for report in &reports {
        let mut text = Vec::new();
        loadtest::print_report(report, &mut text)?;
        super::emit(&String::from_utf8_lossy(&text));
    }
    if let Some(path) = &args.json {
        let value = if args.sweep.is_empty() {
            serde_json::to_value(&reports[0])?
        } else {
            serde_json::json!({ "sweep": reports })
        };
        std::fs::write(path, serde_json::to_string_pretty(&value)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        loadtest::draw_sweep(path, &reports)?;
        super::emitln!("sweep chart written to {}", path.display());
    }
    let lost: usize = reports.iter().map(|r| r.summary.lost).sum();
    if lost > 0 {
        bail!("{lost} request(s) lost: neither completed nor reported as errors");
    }
    Ok(())
}
