//! `entrobatch loadtest`: drives a running server (loopback only) with streamed completion
//! requests, Poisson arrivals or a fixed concurrency, bounded in count and in time, and
//! reports vLLM's serving metrics. Every request ends as completed (exactly `output_len`
//! tokens, `[DONE]` seen) or as an error with its reason; anything else is "lost".

mod arrivals;
mod client;
#[cfg(feature = "plots")]
mod plot;
mod report;
mod stats;
mod target;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

pub use arrivals::{poisson_arrivals, synthetic_prompt};
pub use client::RequestOutcome;
#[cfg(feature = "plots")]
pub use plot::draw_sweep;
pub use report::print_report;
pub use stats::{percentile, summarize, Distribution, Slo, Summary};
pub use target::Target;

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
    /// Nothing is sent after this, and requests still running are cut off (as errors).
    pub duration_limit: Duration,
    pub slo: Slo,
    pub seed: u64,
    /// `model` field of the requests; `None` leaves it out (the server's own model).
    pub model: Option<String>,
    /// Request `i` carries `X-Session-Id: s{i % n}`, as a client of a balancer that hashes on
    /// sessions would; `None` sends no such header.
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
            duration_limit: Duration::from_secs(300),
            slo: Slo::default(),
            seed: 0,
            model: None,
            sessions: None,
            progress: false,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct LoadTestReport {
    pub url: String,
    pub rate: Option<f64>,
    pub concurrency: Option<usize>,
    pub prompt_len: usize,
    pub output_len: usize,
    pub summary: Summary,
    pub outcomes: Vec<RequestOutcome>,
}

use stats::NOT_SENT;
const CUT_OFF: &str = "time limit reached before the response ended";

pub async fn run(config: &LoadTestConfig) -> Result<LoadTestReport> {
    // The target is checked before anything else: a refused host gets no traffic at all.
    let target = Arc::new(Target::parse(&config.url)?);
    if config.requests == 0 || config.output_len == 0 {
        bail!("--requests and --output-len must be at least 1");
    }
    if let Some(rate) = config.rate {
        if rate.is_nan() || rate <= 0.0 {
            bail!("--rate must be positive, got {rate}");
        }
    }
    if config.concurrency == Some(0) {
        bail!("--concurrency must be at least 1");
    }
    tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(target.addr))
        .await
        .map_err(|_| anyhow::anyhow!("timed out"))
        .and_then(|r| r.map_err(Into::into))
        .with_context(|| format!("cannot reach the server at {}", config.url))?;

    let n = config.requests;
    let arrivals = poisson_arrivals(n, config.rate.unwrap_or(f64::INFINITY), config.seed);
    let permits = Arc::new(Semaphore::new(config.concurrency.unwrap_or(n)));
    let bar = progress_bar(n, config.progress);
    let start = Instant::now();
    let deadline = tokio::time::Instant::from_std(start + config.duration_limit);
    let mut tasks = JoinSet::new();
    let mut outcomes = Vec::with_capacity(n);
    for (index, &at) in arrivals.iter().enumerate() {
        let send_at = tokio::time::Instant::from_std(start + Duration::from_secs_f64(at));
        let permit = if send_at >= deadline {
            None
        } else {
            tokio::time::sleep_until(send_at).await;
            tokio::time::timeout_at(deadline, permits.clone().acquire_owned()).await.ok().and_then(Result::ok)
        };
        let Some(permit) = permit else {
            // Every request from here on would start after the limit.
            for index in index..n {
                outcomes.push(RequestOutcome { index, error: Some(NOT_SENT.into()), ..Default::default() });
                bar.inc(1);
            }
            break;
        };
        let body = request_body(config, index);
        let session = config.sessions.filter(|&n| n > 0).map(|n| format!("s{}", index % n));
        let (target, bar, expected) = (target.clone(), bar.clone(), config.output_len);
        tasks.spawn(async move {
            let mut out = RequestOutcome { index, start: start.elapsed().as_secs_f64(), ..Default::default() };
            let result = tokio::time::timeout_at(
                deadline,
                client::stream_request(&target, "/v1/completions", &body, session.as_deref(), &mut out),
            )
            .await;
            out.error = match result {
                Err(_) => Some(CUT_OFF.into()),
                Ok(Err(e)) => Some(format!("{e:#}")),
                Ok(Ok(())) if out.output_tokens != expected => {
                    Some(format!("incomplete response: {} tokens, expected {expected}", out.output_tokens))
                }
                Ok(Ok(())) => None,
            };
            drop(permit);
            bar.inc(1);
            out
        });
    }
    while let Some(joined) = tasks.join_next().await {
        // A panicked task is the one way a request can be lost; it stays uncounted.
        if let Ok(outcome) = joined {
            outcomes.push(outcome);
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

fn request_body(config: &LoadTestConfig, index: usize) -> serde_json::Value {
    let mut body = json!({
        "prompt": synthetic_prompt(config.prompt_len, config.seed, index),
        "max_tokens": config.output_len,
        "temperature": 0.0,
        "ignore_eos": true,
        "stream": true,
        "stream_options": { "include_usage": true },
    });
    if let Some(model) = &config.model {
        body["model"] = json!(model);
    }
    body
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
