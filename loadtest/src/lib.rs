//! `entrobatch loadtest`: drives a running server (loopback only) with streamed completion
//! requests or multi-turn chat conversations, Poisson arrivals or a fixed concurrency, bounded
//! in count and in time, and reports vLLM's serving metrics. Every request ends as completed (exactly `output_len`
//! tokens, `[DONE]` seen) or as an error with its reason; anything else is "lost".

mod arrivals;
mod client;
mod driver;
mod plot;
mod report;
mod stats;
mod target;
mod workload;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

pub use arrivals::{poisson_arrivals, synthetic_prompt};
pub use client::RequestOutcome;
pub use plot::{draw_sweep, draw_sweeps, Series};
pub use report::print_report;
pub use stats::{percentile, summarize, Distribution, Slo, Summary};
pub use target::Target;
pub use workload::Lengths;

#[derive(Clone, Debug)]
pub struct LoadTestConfig {
    pub url: String,
    pub requests: usize,
    /// Poisson arrival rate (requests/s); `None` sends them all at once.
    pub rate: Option<f64>,
    /// At most this many requests in flight; `None`: no cap.
    pub concurrency: Option<usize>,
    /// Prompt length in (approximate) tokens.
    pub prompt_len: usize,
    /// Tokens each request must return (sent with `ignore_eos`).
    pub output_len: usize,
    /// Fixed lengths, or log-normal around `prompt_len` and `output_len` as medians.
    pub lengths: Lengths,
    /// 1: independent completion requests. More: chat conversations of this many turns, each
    /// turn sent when the previous one ended and resending the whole conversation so far.
    pub turns: usize,
    /// Nothing is sent after this, and requests still running are cut off (as errors).
    pub duration_limit: Duration,
    pub slo: Slo,
    pub seed: u64,
    /// `model` field of the requests; `None` leaves it out (the server's own model).
    pub model: Option<String>,
    /// Single-turn request `i` carries `X-Session-Id: s{i % n}`, as a client of a balancer that
    /// hashes on sessions would; `None` sends no such header. (A conversation of several turns
    /// is always its own session.)
    pub sessions: Option<usize>,
    pub progress: bool,
}

impl LoadTestConfig {
    pub fn new(url: impl Into<String>, requests: usize) -> Self {
        Self {
            url: url.into(),
            requests,
            rate: None,
            concurrency: None,
            prompt_len: 32,
            output_len: 32,
            lengths: Lengths::Fixed,
            turns: 1,
            duration_limit: Duration::from_secs(300),
            slo: Slo::default(),
            seed: 0,
            model: None,
            sessions: None,
            progress: false,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadTestReport {
    pub url: String,
    pub rate: Option<f64>,
    pub concurrency: Option<usize>,
    pub prompt_len: usize,
    pub output_len: usize,
    pub turns: usize,
    pub summary: Summary,
    pub outcomes: Vec<RequestOutcome>,
}

pub async fn run(config: &LoadTestConfig) -> Result<LoadTestReport> {
    // The target is checked before anything else: a refused host gets no traffic at all.
    let target = Arc::new(Target::parse(&config.url)?);
    if config.requests == 0 || config.output_len == 0 || config.turns == 0 {
        bail!("--requests, --output-len and --turns must be at least 1");
    }
    if let Some(rate) = config.rate {
        if rate.is_nan() || rate <= 0.0 {
            bail!("--rate must be positive, got {rate}");
        }
    }
    if config.concurrency == Some(0) {
        bail!("--concurrency must be at least 1");
    }
    if let Lengths::LogNormal { sigma } = config.lengths {
        if !(sigma.is_finite() && sigma > 0.0) {
            bail!("the log-normal spread must be positive, got {sigma}");
        }
    }
    tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(target.addr))
        .await
        .map_err(|_| anyhow::anyhow!("timed out"))
        .and_then(|r| r.map_err(Into::into))
        .with_context(|| format!("cannot reach the server at {}", config.url))?;

    let n = config.requests;
    let conversations = workload::plan(
        n,
        config.turns,
        config.prompt_len,
        config.output_len,
        config.lengths,
        config.sessions,
        config.seed,
    );
    // Conversations start as a Poisson process; with several turns each, at rate / turns, so
    // that requests arrive at about `rate` while the server keeps up.
    let rate = config.rate.map_or(f64::INFINITY, |r| r / config.turns as f64);
    let arrivals = poisson_arrivals(conversations.len(), rate, config.seed);
    let bar = progress_bar(n, config.progress);
    let start = Instant::now();
    let run = Arc::new(driver::Run {
        target,
        model: config.model.clone(),
        start,
        deadline: tokio::time::Instant::from_std(start + config.duration_limit),
        permits: Arc::new(Semaphore::new(config.concurrency.unwrap_or(n))),
        bar: bar.clone(),
    });
    let mut tasks = JoinSet::new();
    let mut outcomes = Vec::with_capacity(n);
    for (conversation, &at) in conversations.into_iter().zip(&arrivals) {
        let send_at = tokio::time::Instant::from_std(start + Duration::from_secs_f64(at));
        if send_at < run.deadline {
            tokio::time::sleep_until(send_at).await;
        }
        tasks.spawn(driver::drive(run.clone(), conversation, send_at));
    }
    while let Some(joined) = tasks.join_next().await {
        // A panicked task is the one way a request can be lost; it stays uncounted.
        if let Ok(done) = joined {
            outcomes.extend(done);
        }
    }
    let duration = start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    outcomes.sort_by_key(|o| o.index);
    Ok(LoadTestReport {
        url: config.url.clone(),
        rate: config.rate,
        concurrency: config.concurrency,
        prompt_len: config.prompt_len,
        output_len: config.output_len,
        turns: config.turns,
        summary: summarize(n, &outcomes, duration, &config.slo),
        outcomes,
    })
}

/// One run per rate, in order (`--sweep`).
pub async fn sweep(config: &LoadTestConfig, rates: &[f64]) -> Result<Vec<LoadTestReport>> {
    let mut reports = Vec::with_capacity(rates.len());
    for &rate in rates {
        let run_config = LoadTestConfig { rate: Some(rate), ..config.clone() };
        reports.push(run(&run_config).await.with_context(|| format!("sweep at rate {rate}"))?);
    }
    Ok(reports)
}

fn progress_bar(n: usize, visible: bool) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(n as u64);
    if let Ok(style) = ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} requests {per_sec}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}
