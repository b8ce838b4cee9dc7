//! One strategy over one task: every item is submitted at once and decoded as one batched
//! engine job (the way a serving deployment would see them), then graded. Each strategy
//! gets a fresh engine, so no strategy finds prompts already in the prefix cache that an
//! earlier one computed.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;

use super::bootstrap::{accuracy, accuracy_interval};
use super::report::{ItemResult, StrategyResult};
use super::stats::StrategyStats;
use super::strategy_spec::StrategySpec;
use super::tasks::{EvalItem, Grade, Task};
use crate::{Decoding, Engine, EngineConfig, GenerationParams, Prompt, Request, SamplingParams};

#[derive(Clone, Debug)]
pub struct RunOptions {
    pub model: PathBuf,
    /// Overrides the task's own output budget.
    pub max_tokens: Option<usize>,
    /// 0 = greedy for plain and MTI; entropix sets its own temperatures.
    pub temperature: f32,
    pub seed: u64,
    /// Requests decoded together; all of a job's items when it is at least that many.
    pub max_num_seqs: usize,
}

/// What the runner reports while it works.
#[derive(Clone, Copy, Debug)]
pub enum Progress {
    /// One more item finished decoding.
    Decoded,
    /// Decoding is done; grading starts.
    Grading,
}

pub fn run_strategy(
    task: &dyn Task,
    spec: &StrategySpec,
    options: &RunOptions,
    on_progress: &mut dyn FnMut(Progress),
) -> Result<StrategyResult> {
    let mut config = EngineConfig::new(&options.model);
    config.max_num_seqs = options.max_num_seqs.max(1);
    let engine = Engine::start(config)?;
    let params = GenerationParams {
        sampling: SamplingParams {
            temperature: options.temperature,
            seed: Some(options.seed),
            ..SamplingParams::default()
        },
        max_tokens: options.max_tokens.unwrap_or_else(|| task.default_max_tokens()),
        stop: task.stop(),
        decoding: spec.decoding.clone(),
        // Entropix reports its branch only in the metrics; MTI attaches them anyway.
        return_metrics: matches!(spec.decoding, Decoding::Entropix(_)),
        ..GenerationParams::default()
    };

    let start = Instant::now();
    // A prompt the engine rejects (too long for the model) is that item's wrong answer,
    // not the end of the run.
    let handles: Vec<_> = task
        .items()
        .iter()
        .map(|item| {
            let prompt = with_prefix(&engine, item, &params)?;
            engine.submit(Request::new(prompt, params.clone()))
        })
        .collect();
    let mut outputs = Vec::with_capacity(handles.len());
    for handle in handles {
        outputs.push(handle.map(|h| h.collect_blocking()).map_err(|e| e.to_string()));
        on_progress(Progress::Decoded);
    }
    let wall_secs = start.elapsed().as_secs_f64();
    engine.shutdown(crate::ShutdownMode::Abort);

    on_progress(Progress::Grading);
    let stats =
        StrategyStats::from_outputs(outputs.iter().filter_map(|o| o.as_ref().ok()).map(|o| o.tokens.as_slice()));
    let mut items = Vec::with_capacity(outputs.len());
    for (index, (item, output)) in task.items().iter().zip(outputs).enumerate() {
        let record = match output {
            Ok(out) => {
                let grade = task.grade(index, &out.text)?;
                ItemResult {
                    id: item.id.clone(),
                    reference: task.reference(index),
                    prompt_tokens: out.prompt_token_ids.len(),
                    output_tokens: out.token_ids.len(),
                    finish_reason: out.finish_reason.as_str().to_string(),
                    completion: out.text,
                    grade,
                    error: out.error,
                }
            }
            Err(e) => ItemResult {
                id: item.id.clone(),
                reference: task.reference(index),
                prompt_tokens: 0,
                output_tokens: 0,
                finish_reason: "rejected".into(),
                completion: String::new(),
                grade: Grade::default(),
                error: Some(e),
            },
        };
        items.push(record);
    }
    Ok(summarise(spec, items, wall_secs, stats, options.seed))
}

/// The item's prompt, with its assistant prefix appended after the rendered template (as
/// token ids: `Prompt::Chat` always ends at the generation prompt).
fn with_prefix(engine: &Engine, item: &EvalItem, params: &GenerationParams) -> crate::Result<Prompt> {
    let Some(prefix) = &item.assistant_prefix else { return Ok(item.prompt.clone()) };
    let mut ids = engine.tokenize_prompt(&item.prompt, params)?;
    ids.extend(engine.tokenizer().encode(prefix, false)?);
    Ok(Prompt::TokenIds(ids))
}

/// The per-strategy numbers from the graded items.
pub fn summarise(
    spec: &StrategySpec,
    items: Vec<ItemResult>,
    wall_secs: f64,
    stats: StrategyStats,
    seed: u64,
) -> StrategyResult {
    let outcomes: Vec<bool> = items.iter().map(|i| i.grade.correct).collect();
    let output_tokens: usize = items.iter().map(|i| i.output_tokens).sum();
    StrategyResult {
        label: spec.label.clone(),
        decoding: spec.decoding.clone(),
        n: items.len(),
        correct: outcomes.iter().filter(|&&c| c).count(),
        accuracy: accuracy(&outcomes),
        ci95: accuracy_interval(&outcomes, seed),
        output_tokens,
        prompt_tokens: items.iter().map(|i| i.prompt_tokens).sum(),
        wall_secs,
        tokens_per_sec: if wall_secs > 0.0 { output_tokens as f64 / wall_secs } else { 0.0 },
        mean_output_len: if items.is_empty() { 0.0 } else { output_tokens as f64 / items.len() as f64 },
        errors: items.iter().filter(|i| i.error.is_some()).count(),
        stats,
        items,
    }
}
