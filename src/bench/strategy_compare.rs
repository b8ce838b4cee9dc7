//! The same requests decoded with several strategies, one after another in one process, so
//! time per output token can be compared against plain decoding on the same (shared) cores.
//! Plain runs first and last: the spread between its two runs is the measurement noise.

use anyhow::Result;
use serde::Serialize;

use super::throughput::{run, ThroughputConfig, ThroughputReport};
use crate::strategy::MtiConfig;
use crate::Decoding;

#[derive(Clone, Debug, Serialize)]
pub struct StrategyRun {
    pub label: String,
    pub report: ThroughputReport,
    /// Wall time over output tokens, prefill included.
    pub ms_per_output_token: f64,
    /// Wall time over engine steps.
    pub ms_per_step: f64,
    /// `ms_per_output_token` over the mean of the plain runs.
    pub relative_to_plain: f64,
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
    mut on_run: impl FnMut(&str),
) -> Result<Vec<StrategyRun>> {
    let mut out = Vec::with_capacity(runs.len());
    for (label, decoding) in runs {
        on_run(label);
        let config = ThroughputConfig { decoding: decoding.clone(), baseline_requests: 0, ..config.clone() };
        let report = run(&config, |_| {})?;
        let wall_ms = report.engine.wall_secs * 1e3;
        out.push(StrategyRun {
            label: label.clone(),
            ms_per_output_token: wall_ms / report.output_tokens.max(1) as f64,
            ms_per_step: wall_ms / report.steps.max(1) as f64,
            relative_to_plain: 1.0,
            report,
        });
    }
    let plain: Vec<f64> = out
        .iter()
        .filter(|r| r.report.decoding == Decoding::Plain)
        .map(|r| r.ms_per_output_token)
        .collect();
    if !plain.is_empty() {
        let base = plain.iter().sum::<f64>() / plain.len() as f64;
        for r in &mut out {
            r.relative_to_plain = r.ms_per_output_token / base;
        }
    }
    Ok(out)
}

pub fn render(runs: &[StrategyRun]) -> String {
    let Some(first) = runs.first() else { return String::new() };
    let r = &first.report;
    let mut out = format!(
        "{} | {} requests x ({} in + {} out), concurrency {}\n{:<24}{:>10}{:>10}{:>10}{:>8}{:>10}{:>10}\n",
        r.model, r.requests, r.prompt_len, r.output_len, r.concurrency,
        "strategy", "ms/token", "vs plain", "trigger", "steps", "ms/step", "wall s"
    );
    for run in runs {
        let trigger = run.report.mti_trigger_rate.map_or("-".to_string(), |t| format!("{:.1}%", 100.0 * t));
        out.push_str(&format!(
            "{:<24}{:>10.2}{:>9.2}x{:>10}{:>8}{:>10.1}{:>10.1}\n",
            run.label, run.ms_per_output_token, run.relative_to_plain, trigger,
            run.report.steps, run.ms_per_step, run.report.engine.wall_secs
        ));
    }
    out
}
