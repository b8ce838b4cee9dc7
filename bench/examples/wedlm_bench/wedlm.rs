//! WeDLM inside the continuous batch: rows per forward and time per step for a batch that
//! mixes WeDLM and plain sequences, against the same batch all plain, on a generated
//! random-weight checkpoint in Hugging Face layout (no trained WeDLM checkpoint can be
//! fetched here). Run by `main.rs` beside it.
//!
//! A random model's mask predictions mean nothing, so tokens per forward is not measured
//! but bracketed: `tau = inf` fills every mask every forward (W tokens per forward, the
//! ceiling), `tau = none` with a huge position penalty fills exactly the leftmost mask (one
//! token per forward, the floor). What is measured is what a forward costs with the windows
//! in it.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;

use entrobatch::model_runner::testing_hf::{write_tiny_hf, TinyHfSpec};
use entrobatch::strategy::WedlmConfig;
use entrobatch::{Decoding, Engine, EngineConfig, GenerationParams, Prompt, Request, SamplingParams};

#[derive(Clone, Debug)]
pub struct WedlmBenchConfig {
    /// Checkpoint directory; generated (see `bench_spec`) when it has no config.json.
    pub model_dir: PathBuf,
    pub sequences: usize,
    /// How many of `sequences` decode with WeDLM in the mixed runs.
    pub wedlm_sequences: usize,
    pub prompt_len: usize,
    pub output_len: usize,
    pub window_size: usize,
}

impl Default for WedlmBenchConfig {
    fn default() -> Self {
        Self {
            model_dir: std::env::temp_dir().join("entrobatch-wedlm-bench-model"),
            sequences: 8,
            wedlm_sequences: 4,
            prompt_len: 64,
            output_len: 64,
            window_size: 16,
        }
    }
}

/// The benchmark model: a small Qwen3 (QK-norm) with WeDLM's config fields, big enough that
/// a forward costs more than the engine's bookkeeping. Its 320-token vocabulary makes the
/// lm_head almost free, unlike a real 152k-vocabulary model where every mask row pays it.
pub fn bench_spec() -> TinyHfSpec {
    TinyHfSpec {
        hidden: 512,
        n_layers: 8,
        n_heads: 8,
        n_kv_heads: 4,
        head_dim: 64,
        intermediate: 1536,
        context_length: 2048,
        proj_std: 0.05,
        ..TinyHfSpec::qwen3()
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ScenarioReport {
    pub label: String,
    pub wedlm: Option<WedlmConfig>,
    pub steps: u64,
    pub rows_per_forward: f64,
    pub ms_per_step: f64,
    pub wall_secs: f64,
    /// When the last WeDLM request finished (None without any), and the last plain one.
    pub wedlm_done_secs: Option<f64>,
    pub plain_done_secs: Option<f64>,
    pub output_tokens: u64,
    pub output_tokens_per_s: f64,
    /// WeDLM window forwards (sequences x steps) and committed tokens per window forward.
    pub wedlm_forwards: u64,
    pub wedlm_tokens_per_forward: Option<f64>,
    /// Mean over WeDLM requests of their own tokens per forward.
    pub wedlm_request_tokens_per_forward: Option<f64>,
    /// Mean window rows (filled + masks) per window forward.
    pub wedlm_rows_per_window: Option<f64>,
}

/// A run: its label, the WeDLM settings, and how many sequences use them (the rest are plain).
pub struct Scenario {
    pub label: String,
    pub wedlm: Option<WedlmConfig>,
    pub wedlm_sequences: usize,
}

/// All plain first and last (their spread is the noise), the mixed batch at the ceiling,
/// floor and default settings, and an all-WeDLM batch at the ceiling.
pub fn scenarios(config: &WedlmBenchConfig) -> Vec<Scenario> {
    let w = |tau: Option<f32>, lambda: f32| {
        Some(WedlmConfig { window_size: config.window_size, entropy_threshold: tau, pos_penalty: lambda })
    };
    let run =
        |label: &str, wedlm: Option<WedlmConfig>, n: usize| Scenario { label: label.into(), wedlm, wedlm_sequences: n };
    let (all, mixed) = (config.sequences, config.wedlm_sequences);
    vec![
        run("all plain", None, 0),
        run("mixed, wedlm tau=inf (W tokens/forward)", w(Some(f32::INFINITY), 0.0), mixed),
        run("mixed, wedlm tau=none lambda=1000 (1 token/forward)", w(None, 1000.0), mixed),
        run("mixed, wedlm defaults tau=0.4 lambda=0.02", w(Some(0.4), 0.02), mixed),
        run("all wedlm tau=inf (W tokens/forward)", w(Some(f32::INFINITY), 0.0), all),
        run("all wedlm tau=none lambda=1000 (1 token/forward)", w(None, 1000.0), all),
        run("all plain (again)", None, 0),
    ]
}

pub fn ensure_model(dir: &Path) -> Result<()> {
    if !dir.join("config.json").is_file() {
        write_tiny_hf(dir, &bench_spec()).with_context(|| format!("writing {}", dir.display()))?;
    }
    Ok(())
}

pub fn run_scenario(config: &WedlmBenchConfig, scenario: &Scenario) -> Result<ScenarioReport> {
    let (label, wedlm) = (scenario.label.as_str(), scenario.wedlm.as_ref());
    let num_wedlm = if wedlm.is_some() { scenario.wedlm_sequences.min(config.sequences) } else { 0 };
    let mut engine_config = EngineConfig::new(&config.model_dir);
    engine_config.max_num_seqs = config.sequences;
    engine_config.max_num_batched_tokens = 1024;
    let engine = Engine::start(engine_config)?;
    let prompts = entrobatch_bench::throughput::synthetic_prompts(300, config.sequences, config.prompt_len);
    let plain = GenerationParams {
        sampling: SamplingParams::greedy(),
        max_tokens: config.output_len,
        ignore_eos: true,
        ..GenerationParams::default()
    };
    let start = Instant::now();
    let handles = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut params = plain.clone();
            if let (Some(w), true) = (wedlm, i < num_wedlm) {
                params.decoding = Decoding::Wedlm(w.clone());
            }
            engine.submit(Request::new(Prompt::TokenIds(p.clone()), params))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    // WeDLM requests come first, so the time after the first group is when they all finished.
    let (mut wedlm_done_secs, mut plain_done_secs) = (None, None);
    for (i, handle) in handles.into_iter().enumerate() {
        let out = handle.collect_blocking();
        if let Some(e) = out.error {
            anyhow::bail!("{label}: request {i} failed: {e}");
        }
        let done = Some(start.elapsed().as_secs_f64());
        if i < num_wedlm {
            wedlm_done_secs = done;
        } else {
            plain_done_secs = done;
        }
    }
    let wall = start.elapsed().as_secs_f64();
    // The loop counts a step after its tokens are sent and a request's strategy records its
    // tokens per forward when dropped: read the metrics once the loop has stopped.
    let m = engine.metrics().clone();
    engine.shutdown(entrobatch::ShutdownMode::Finish);
    let steps = m.steps.load(Ordering::Relaxed);
    let rows = m.forward_rows.load(Ordering::Relaxed);
    let output_tokens = m.output_tokens.load(Ordering::Relaxed);
    let w = &m.wedlm;
    let wedlm_forwards = w.forwards.load(Ordering::Relaxed);
    let h = &w.request_tokens_per_forward;
    let wedlm_request_tokens_per_forward = (h.count() > 0).then(|| h.sum() / h.count() as f64);
    let report = ScenarioReport {
        label: label.to_string(),
        wedlm: wedlm.cloned(),
        steps,
        rows_per_forward: rows as f64 / steps.max(1) as f64,
        ms_per_step: 1e3 * m.step_duration.sum() / m.step_duration.count().max(1) as f64,
        wall_secs: wall,
        wedlm_done_secs,
        plain_done_secs,
        output_tokens,
        output_tokens_per_s: output_tokens as f64 / wall,
        wedlm_forwards,
        wedlm_tokens_per_forward: w.tokens_per_forward(),
        wedlm_request_tokens_per_forward,
        wedlm_rows_per_window: (wedlm_forwards > 0)
            .then(|| w.window_rows.load(Ordering::Relaxed) as f64 / wedlm_forwards as f64),
    };
    Ok(report)
}

pub fn run(config: &WedlmBenchConfig, mut on_scenario: impl FnMut(&str)) -> Result<Vec<ScenarioReport>> {
    ensure_model(&config.model_dir)?;
    scenarios(config)
        .iter()
        .map(|s| {
            on_scenario(&s.label);
            run_scenario(config, s)
        })
        .collect()
}

/// A markdown table for the benchmark notebook (docs/benchmarks/notebook.md, "WeDLM").
pub fn render_markdown(config: &WedlmBenchConfig, reports: &[ScenarioReport]) -> String {
    let mut out = format!(
        "{} sequences ({} WeDLM in the mixed runs, W = {}), {} prompt + {} output tokens each, greedy\n\n\
         | run | steps | rows/forward | ms/step | output tok/s | WeDLM done (s) | plain done (s) | WeDLM tok/window-forward | window rows/window-forward |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        config.sequences, config.wedlm_sequences, config.window_size, config.prompt_len, config.output_len
    );
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.2}"));
    for r in reports {
        out.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} |\n",
            r.label,
            r.steps,
            r.rows_per_forward,
            r.ms_per_step,
            r.output_tokens_per_s,
            opt(r.wedlm_done_secs),
            opt(r.plain_done_secs),
            opt(r.wedlm_tokens_per_forward),
            opt(r.wedlm_rows_per_window),
        ));
    }
    out
}
