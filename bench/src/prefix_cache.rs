//! Time to first token with and without a cached prompt prefix (issue 7's prefix-caching
//! target): each round submits a request whose long prefix is new (cold), then one with the
//! same prefix and a different suffix (warm), one at a time on an otherwise idle engine.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Result};
use serde::Serialize;

use super::throughput::synthetic_prompts;
use entrobatch::{Engine, EngineConfig, EngineMetrics, Event, GenerationParams, Prompt, Request, SamplingParams};

#[derive(Clone, Debug)]
pub struct PrefixCacheConfig {
    pub model: PathBuf,
    pub prefix_len: usize,
    pub suffix_len: usize,
    pub rounds: usize,
    /// `None`: the engine defaults (prefix caching on).
    pub engine: Option<EngineConfig>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PrefixCacheReport {
    pub model: String,
    pub prefix_len: usize,
    pub suffix_len: usize,
    pub rounds: usize,
    pub cold_ttft_ms: Vec<f64>,
    pub warm_ttft_ms: Vec<f64>,
    pub cold_median_ms: f64,
    pub warm_median_ms: f64,
    /// Cold over warm median time to first token.
    pub speedup: f64,
    /// Prompt tokens served from the cache over prompt tokens looked up, whole run.
    pub hit_rate: f64,
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Milliseconds from submit to the first token of a one-token request.
fn time_to_first_token(engine: &Engine, prompt: Vec<u32>) -> Result<f64> {
    let params =
        GenerationParams { sampling: SamplingParams::greedy(), max_tokens: 1, ignore_eos: true, ..Default::default() };
    let start = Instant::now();
    let mut handle = engine.submit(Request::new(Prompt::TokenIds(prompt), params))?;
    let mut ttft = None;
    while let Some(event) = handle.next_blocking() {
        match event {
            Event::Tokens { .. } if ttft.is_none() => ttft = Some(start.elapsed().as_secs_f64() * 1e3),
            Event::Finished { error: Some(e), .. } => bail!("request failed: {e}"),
            _ => {}
        }
    }
    ttft.ok_or_else(|| anyhow::anyhow!("the request produced no token"))
}

pub fn run(config: &PrefixCacheConfig, mut on_round: impl FnMut(usize)) -> Result<PrefixCacheReport> {
    let engine_config = config.engine.clone().unwrap_or_else(|| EngineConfig::new(&config.model));
    if !engine_config.enable_prefix_caching {
        bail!("prefix caching is disabled in this engine configuration");
    }
    let engine = Engine::start(engine_config)?;
    let vocab = engine.info().model_config.vocab_size;
    // One warm-up request so the first cold round does not pay for first-touch page faults.
    let warmup = synthetic_prompts(vocab, 1, config.prefix_len + config.suffix_len).remove(0);
    time_to_first_token(&engine, warmup.iter().rev().copied().collect())?;
    let texts = synthetic_prompts(vocab, 3 * config.rounds, config.prefix_len.max(config.suffix_len));
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for round in 0..config.rounds {
        let prefix = &texts[3 * round][..config.prefix_len];
        let with_suffix = |s: &[u32]| [prefix, &s[..config.suffix_len]].concat();
        cold.push(time_to_first_token(&engine, with_suffix(&texts[3 * round + 1]))?);
        warm.push(time_to_first_token(&engine, with_suffix(&texts[3 * round + 2]))?);
        on_round(round + 1);
    }
    let metrics = engine.metrics();
    let queries = EngineMetrics::get(&metrics.prefix_cache_queries);
    let hits = EngineMetrics::get(&metrics.prefix_cache_hits);
    engine.shutdown(entrobatch::ShutdownMode::Finish);
    let (cold_median_ms, warm_median_ms) = (median(&cold), median(&warm));
    Ok(PrefixCacheReport {
        model: config.model.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
        prefix_len: config.prefix_len,
        suffix_len: config.suffix_len,
        rounds: config.rounds,
        cold_ttft_ms: cold,
        warm_ttft_ms: warm,
        cold_median_ms,
        warm_median_ms,
        speedup: cold_median_ms / warm_median_ms,
        hit_rate: if queries > 0 { hits as f64 / queries as f64 } else { 0.0 },
    })
}

pub fn render_table(r: &PrefixCacheReport) -> String {
    format!(
        "{} | prefix {} + suffix {} tokens, {} rounds\n{:<12} {:>12} {:>12}\n{:<12} {:>12.1} {:>12.1}\nspeedup {:.1}x, prefix-cache hit rate {:.1}%\n",
        r.model, r.prefix_len, r.suffix_len, r.rounds, "", "cold TTFT ms", "warm TTFT ms", "median",
        r.cold_median_ms, r.warm_median_ms, r.speedup, 100.0 * r.hit_rate
    )
}
