//! `entrobatch bench branching`: what branching requests cost the plain requests beside them.
//! Each round runs the same prompts twice in one engine, alternating which goes first: once
//! half branching and half plain, once all plain. A plain request's time per output token is
//! read from its own stream (first token to last, over the tokens between), and the plain
//! half's p50 and p99 are compared across the two runs; the branching half's extra tokens
//! (continuations not kept), when it finished, and the wall time are reported beside.

use std::time::Instant;

use anyhow::{bail, Result};
use serde::Serialize;

use entrobatch::strategy::BranchConfig;
use entrobatch::{Decoding, Engine, Event, GenerationParams, Prompt, Request, SamplingParams};

pub struct BranchMixConfig {
    pub requests: usize,
    pub max_tokens: usize,
    pub rounds: usize,
    pub branch: BranchConfig,
}

#[derive(Clone, Debug, Serialize)]
pub struct MixRun {
    /// Half the requests branched (the odd ones).
    pub mixed: bool,
    pub seconds: f64,
    /// TPOT of the plain requests (the even ones in both runs), milliseconds.
    pub plain_tpot_p50_ms: f64,
    pub plain_tpot_p99_ms: f64,
    /// When the other half (branching in the mixed run) had its last token, p50 over its
    /// requests, seconds from submission.
    pub other_half_done_p50_s: f64,
    pub output_tokens: usize,
    /// Tokens the branching requests decoded and threw away, and their branch points.
    pub branch_extra_tokens: usize,
    pub branch_points: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct BranchMixReport {
    pub requests: usize,
    pub max_tokens: usize,
    pub runs: Vec<MixRun>,
    /// The plain half's TPOT p99 beside branching over all plain, best round of each.
    pub p99_ratio: f64,
    /// Wall time of the mixed run over the all-plain run, summed over rounds.
    pub seconds_ratio: f64,
}

pub fn run(engine: &Engine, config: &BranchMixConfig, mut on_run: impl FnMut(&MixRun)) -> Result<BranchMixReport> {
    let mut runs = Vec::new();
    for round in 0..config.rounds {
        for k in 0..2 {
            let mixed = (round + k) % 2 == 0;
            let run = run_once(engine, config, mixed)?;
            on_run(&run);
            runs.push(run);
        }
    }
    let best_p99 =
        |m: bool| runs.iter().filter(|r| r.mixed == m).map(|r| r.plain_tpot_p99_ms).fold(f64::INFINITY, f64::min);
    let seconds = |m: bool| runs.iter().filter(|r| r.mixed == m).map(|r| r.seconds).sum::<f64>();
    Ok(BranchMixReport {
        requests: config.requests,
        max_tokens: config.max_tokens,
        p99_ratio: best_p99(true) / best_p99(false).max(1e-9),
        seconds_ratio: seconds(true) / seconds(false).max(1e-9),
        runs,
    })
}

fn run_once(engine: &Engine, config: &BranchMixConfig, mixed: bool) -> Result<MixRun> {
    let requests: Vec<Request> = (0..config.requests)
        .map(|i| {
            let branching = mixed && i % 2 == 1;
            let params = GenerationParams {
                sampling: SamplingParams::greedy(),
                max_tokens: config.max_tokens,
                ignore_eos: true,
                decoding: if branching { Decoding::Branch(config.branch.clone()) } else { Decoding::Plain },
                ..GenerationParams::default()
            };
            Request::new(Prompt::Text(format!("Story {i}: the lighthouse keeper's {} secret was", i % 7)), params)
        })
        .collect();
    let started = Instant::now();
    let handles = engine.submit_all(requests)?;
    // One reader per stream, so each token's arrival is seen when it is sent.
    let results: Vec<Result<(Vec<Instant>, Option<serde_json::Value>)>> = std::thread::scope(|scope| {
        let readers: Vec<_> = handles
            .into_iter()
            .map(|mut handle| {
                scope.spawn(move || {
                    let mut arrivals = Vec::new();
                    while let Some(event) = handle.next_blocking() {
                        match event {
                            Event::Tokens { tokens, .. } => arrivals.extend(tokens.iter().map(|_| Instant::now())),
                            Event::Finished { error: Some(e), .. } => bail!("a request failed: {e}"),
                            Event::Finished { strategy_stats, .. } => return Ok((arrivals, strategy_stats)),
                            Event::PromptLogprobs(_) => {}
                        }
                    }
                    bail!("a stream ended without its final event")
                })
            })
            .collect();
        readers.into_iter().map(|r| r.join().unwrap_or_else(|_| bail!("a reader panicked"))).collect()
    });
    let seconds = started.elapsed().as_secs_f64();
    let (mut tpots, mut other_done) = (Vec::new(), Vec::new());
    let (mut output_tokens, mut extra, mut points) = (0, 0, 0);
    for (i, result) in results.into_iter().enumerate() {
        let (arrivals, stats) = result?;
        output_tokens += arrivals.len();
        if let Some(stats) = stats.filter(|s| s["strategy"] == "branch") {
            extra += stats["branch_extra_tokens"].as_u64().unwrap_or(0) as usize;
            points += stats["branch_points"].as_u64().unwrap_or(0) as usize;
        }
        if i % 2 == 0 && arrivals.len() > 1 {
            let span = arrivals[arrivals.len() - 1].duration_since(arrivals[0]).as_secs_f64();
            tpots.push(1e3 * span / (arrivals.len() - 1) as f64);
        }
        if let (1, Some(last)) = (i % 2, arrivals.last()) {
            other_done.push(last.duration_since(started).as_secs_f64());
        }
    }
    tpots.sort_by(f64::total_cmp);
    other_done.sort_by(f64::total_cmp);
    Ok(MixRun {
        mixed,
        seconds,
        plain_tpot_p50_ms: percentile(&tpots, 0.50),
        plain_tpot_p99_ms: percentile(&tpots, 0.99),
        other_half_done_p50_s: percentile(&other_done, 0.50),
        output_tokens,
        branch_extra_tokens: extra,
        branch_points: points,
    })
}

/// Nearest-rank percentile of sorted values; 0 for none.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
