//! The same requests decoded with several strategies, one after another in one process, so
//! time per output token can be compared against plain decoding on the same (shared) cores.
//! Plain runs first and last: the spread between its two runs is the measurement noise.

use anyhow::Result;
use serde::Serialize;

use super::throughput::{run_with_prompts, ThroughputConfig, ThroughputReport};
use entrobatch::strategy::MtiConfig;
use entrobatch::Decoding;

#[derive(Clone, Debug, Serialize)]
pub struct StrategyRun {
    pub label: String,
    /// The fastest (by wall time) of the rounds.
    pub report: ThroughputReport,
    /// Wall time over output tokens, prefill included (best round).
    pub ms_per_output_token: f64,
    /// Process CPU time over output tokens (best round).
    pub cpu_ms_per_output_token: f64,
    /// Wall time over engine steps.
    pub ms_per_step: f64,
    /// `ms_per_output_token` over the best plain run's.
    pub relative_to_plain: f64,
    /// `cpu_ms_per_output_token` over the best plain run's.
    pub cpu_relative_to_plain: f64,
}

/// Plain, MTI at each threshold with `guidance_scale`, then plain again.
pub fn mti_runs(thresholds: &[f32], guidance_scale: f32) -> Vec<(String, Decoding)> {
    let mut runs = vec![("plain".to_string(), Decoding::Plain)];
    for &tau in thresholds {
        let mti = MtiConfig { entropy_threshold: tau, guidance_scale, ..MtiConfig::default() };
        runs.push((format!("mti tau={tau} w={guidance_scale}"), Decoding::Mti(mti)));
    }
    runs.push(("plain (again)".to_string(), Decoding::Plain));
    runs
}

/// Runs `config` once per strategy (no sequential baseline) and relates each to plain.
pub fn compare(
    config: &ThroughputConfig,
    runs: &[(String, Decoding)],
    on_run: impl FnMut(&str),
) -> Result<Vec<StrategyRun>> {
    compare_on(config, None, runs, 1, on_run)
}

/// `compare` on the given prompts (synthetic ones when None), all runs `rounds` times in
/// turn; each run keeps its best round, which filters out other tenants' bursts of load.
pub fn compare_on(
    config: &ThroughputConfig,
    prompts: Option<&[Vec<u32>]>,
    runs: &[(String, Decoding)],
    rounds: usize,
    mut on_run: impl FnMut(&str),
) -> Result<Vec<StrategyRun>> {
    let mut out: Vec<Option<StrategyRun>> = vec![None; runs.len()];
    for round in 0..rounds.max(1) {
        for ((label, decoding), best) in runs.iter().zip(&mut out) {
            on_run(&format!("{label} (round {})", round + 1));
            let config = ThroughputConfig { decoding: decoding.clone(), baseline_requests: 0, ..config.clone() };
            let report = run_with_prompts(&config, prompts, |_| {})?;
            let tokens = report.output_tokens.max(1) as f64;
            let wall_ms = report.engine.wall_secs * 1e3;
            let cpu_ms = report.cpu_secs * 1e3 / tokens;
            let run = StrategyRun {
                label: label.clone(),
                ms_per_output_token: wall_ms / tokens,
                cpu_ms_per_output_token: cpu_ms,
                ms_per_step: wall_ms / report.steps.max(1) as f64,
                relative_to_plain: 1.0,
                cpu_relative_to_plain: 1.0,
                report,
            };
            // Wall and CPU time each keep their own best round.
            let cpu_best = best.as_ref().map_or(cpu_ms, |b| b.cpu_ms_per_output_token.min(cpu_ms));
            if best.as_ref().is_none_or(|b| run.ms_per_output_token < b.ms_per_output_token) {
                *best = Some(run);
            }
            if let Some(b) = best {
                b.cpu_ms_per_output_token = cpu_best;
            }
        }
    }
    let mut out: Vec<StrategyRun> = out.into_iter().flatten().collect();
    let best_plain = |f: fn(&StrategyRun) -> f64| {
        out.iter().filter(|r| r.report.decoding == Decoding::Plain).map(f).reduce(f64::min)
    };
    if let (Some(wall), Some(cpu)) = (best_plain(|r| r.ms_per_output_token), best_plain(|r| r.cpu_ms_per_output_token))
    {
        for r in &mut out {
            r.relative_to_plain = r.ms_per_output_token / wall;
            r.cpu_relative_to_plain = r.cpu_ms_per_output_token / cpu;
        }
    }
    Ok(out)
}

pub fn render(runs: &[StrategyRun]) -> String {
    let Some(first) = runs.first() else { return String::new() };
    let r = &first.report;
    let mut out = format!(
        "{} | {} requests x ({} in + {} out), concurrency {}\n{:<24}{:>10}{:>10}{:>12}{:>10}{:>10}{:>8}{:>10}\n",
        r.model,
        r.requests,
        r.prompt_len,
        r.output_len,
        r.concurrency,
        "strategy",
        "ms/token",
        "vs plain",
        "cpu ms/tok",
        "vs plain",
        "trigger",
        "steps",
        "ms/step"
    );
    for run in runs {
        let trigger = run.report.mti_trigger_rate.map_or("-".to_string(), |t| format!("{:.1}%", 100.0 * t));
        out.push_str(&format!(
            "{:<24}{:>10.2}{:>9.2}x{:>12.2}{:>9.2}x{:>10}{:>8}{:>10.1}\n",
            run.label,
            run.ms_per_output_token,
            run.relative_to_plain,
            run.cpu_ms_per_output_token,
            run.cpu_relative_to_plain,
            trigger,
            run.report.steps,
            run.ms_per_step
        ));
    }
    out
}

/// English prose for `text_prompts`: strategies that react to the model's uncertainty behave
/// on text as they would in use, where random token prompts make every row uncertain.
const PROSE: &str = "The old lighthouse stood at the edge of the cliff for more than two hundred years. \
Every evening the keeper climbed the narrow stairs, trimmed the wick and polished the great lens, \
so that ships passing in the dark would know where the rocks were. When electricity reached the \
village, the lamp was replaced by a bulb and the keeper by a timer, but people still walked up the \
hill at sunset to watch the light come on. Bread is one of the oldest prepared foods. To make a \
simple loaf, mix flour, water, salt and yeast into a dough, knead it until it is smooth and \
elastic, and leave it to rise in a warm place for about an hour. Then shape it, let it rise again, \
and bake it in a hot oven until the crust is brown and the loaf sounds hollow when tapped. \
Photosynthesis is the process by which green plants turn light into chemical energy. Inside the \
leaves, chlorophyll absorbs sunlight and uses it to combine carbon dioxide from the air with \
water from the soil, producing sugar and releasing oxygen as a by-product. Almost every food \
chain on Earth begins with this reaction. The first computers filled entire rooms and were \
programmed by plugging cables into panels. Later machines read their instructions from punched \
cards, and it was only with the invention of the transistor and then the integrated circuit that \
computers became small, cheap and reliable enough to sit on a desk. Today a phone in a pocket \
holds more computing power than all the machines of the nineteen sixties put together. On a \
quiet morning in early spring, the river was high with melted snow, and the children from the \
farm ran down to the bridge to watch branches and chunks of ice race past underneath.";

/// `n` distinct windows of `len` tokens over `PROSE` (distinct first blocks, so the prefix
/// cache cannot share them).
pub fn text_prompts(model: &std::path::Path, n: usize, len: usize) -> Result<Vec<Vec<u32>>> {
    let mut file = std::fs::File::open(model)?;
    let content = candle_core::quantized::gguf_file::Content::read(&mut file)?;
    let tokenizer = entrobatch::model_runner::Tokenizer::from_gguf(&content)?;
    let ids = tokenizer.encode(PROSE, false)?;
    if ids.len() < len + n {
        anyhow::bail!("the prose is {} tokens: too short for {n} windows of {len}", ids.len());
    }
    let stride = (ids.len() - len) / n;
    Ok((0..n).map(|i| ids[i * stride..i * stride + len].to_vec()).collect())
}
