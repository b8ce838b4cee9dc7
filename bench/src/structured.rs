//! `entrobatch bench structured`: the cost of structured outputs, side by side in one engine.
//! Each round runs the same N prompts twice, alternating which goes first: once under a JSON
//! schema (every row masked by its grammar) and once free (`ignore_eos`, so both runs decode
//! the full `max_tokens`; the schema admits outputs longer than that, so the constrained run
//! does too). Reported: total and output tokens/s of each, their ratio, and the mean time to
//! compute one mask (the engine's own counters).

use std::time::Instant;

use anyhow::{bail, Result};
use serde::Serialize;
use serde_json::{json, Value};

use entrobatch::structured::StructuredOutput;
use entrobatch::{Engine, EngineMetrics, GenerationParams, Prompt, Request, SamplingParams};

pub struct StructuredBenchConfig {
    pub requests: usize,
    pub max_tokens: usize,
    pub rounds: usize,
    pub schema: Value,
}

/// An array of records with free strings and numbers: long outputs, a non-trivial grammar.
pub fn default_schema() -> Value {
    json!({
        "type": "array",
        "minItems": 64,
        "items": {
            "type": "object",
            "properties": {
                "id": {"type": "integer", "minimum": 0},
                "name": {"type": "string", "maxLength": 24},
                "score": {"type": "number"},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
                "active": {"type": "boolean"}
            },
            "required": ["id", "name", "score", "tags", "active"],
            "additionalProperties": false
        }
    })
}

#[derive(Clone, Debug, Serialize)]
pub struct RunStats {
    pub constrained: bool,
    pub seconds: f64,
    pub prompt_tokens: usize,
    pub output_tokens: usize,
    pub total_tok_s: f64,
    pub output_tok_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct StructuredReport {
    pub requests: usize,
    pub max_tokens: usize,
    pub runs: Vec<RunStats>,
    /// Constrained total tok/s over free total tok/s, from the summed rounds.
    pub total_ratio: f64,
    pub mean_mask_us: Option<f64>,
}

pub fn run(
    engine: &Engine,
    config: &StructuredBenchConfig,
    mut on_run: impl FnMut(&RunStats),
) -> Result<StructuredReport> {
    let masks_before =
        (EngineMetrics::get(&engine.metrics().grammar_masks), EngineMetrics::get(&engine.metrics().grammar_mask_nanos));
    let mut runs = Vec::new();
    for round in 0..config.rounds {
        for k in 0..2 {
            // Alternate the order so drift on a shared machine does not favour one side.
            let constrained = (round + k) % 2 == 0;
            let stats = run_once(engine, config, constrained, round)?;
            on_run(&stats);
            runs.push(stats);
        }
    }
    let total = |c: bool| {
        let (tokens, secs) = runs
            .iter()
            .filter(|r| r.constrained == c)
            .fold((0usize, 0f64), |(t, s), r| (t + r.prompt_tokens + r.output_tokens, s + r.seconds));
        tokens as f64 / secs.max(1e-9)
    };
    let masks = EngineMetrics::get(&engine.metrics().grammar_masks) - masks_before.0;
    let nanos = EngineMetrics::get(&engine.metrics().grammar_mask_nanos) - masks_before.1;
    Ok(StructuredReport {
        requests: config.requests,
        max_tokens: config.max_tokens,
        total_ratio: total(true) / total(false).max(1e-9),
        mean_mask_us: (masks > 0).then(|| nanos as f64 / masks as f64 / 1e3),
        runs,
    })
}

fn run_once(engine: &Engine, config: &StructuredBenchConfig, constrained: bool, round: usize) -> Result<RunStats> {
    let requests: Vec<Request> = (0..config.requests)
        .map(|i| {
            let params = GenerationParams {
                sampling: SamplingParams {
                    temperature: 1.0,
                    seed: Some((round * 100_000 + i) as u64),
                    ..SamplingParams::default()
                },
                max_tokens: config.max_tokens,
                ignore_eos: !constrained,
                structured: constrained.then(|| StructuredOutput::JsonSchema(config.schema.clone())),
                ..GenerationParams::default()
            };
            Request::new(Prompt::Text(format!("Records of inventory batch {i}, as JSON:")), params)
        })
        .collect();
    let started = Instant::now();
    let outputs: Vec<_> = engine.submit_all(requests)?.into_iter().map(|h| h.collect_blocking()).collect();
    let seconds = started.elapsed().as_secs_f64();
    if let Some(failed) = outputs.iter().find(|o| o.error.is_some()) {
        bail!("a request failed: {:?}", failed.error);
    }
    let prompt_tokens = outputs.iter().map(|o| o.prompt_token_ids.len()).sum();
    let output_tokens: usize = outputs.iter().map(|o| o.token_ids.len()).sum();
    Ok(RunStats {
        constrained,
        seconds,
        prompt_tokens,
        output_tokens,
        total_tok_s: (prompt_tokens + output_tokens) as f64 / seconds,
        output_tok_s: output_tokens as f64 / seconds,
    })
}
