//! One strategy over one task: the items (times the strategy's samples) are submitted a
//! chunk at a time and each chunk decoded as one batched engine job (the way a serving
//! deployment would see them), then graded and, when resumable, written down. Each strategy
//! gets a fresh engine, so no strategy finds prompts already in the prefix cache that an
//! earlier one computed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;

use super::bootstrap::{mean, mean_interval};
use super::checkpoint::{self, Checkpoint, Chunk, RunKey};
use super::paired;
use super::report::{ItemResult, SelectionResult, StrategyResult};
use super::stats::{BranchTotals, StrategyStats};
use super::strategy_spec::StrategySpec;
use super::tasks::{EvalItem, Grade, Task};
use entrobatch::{Decoding, Engine, EngineConfig, GenerationOutput, GenerationParams, Prompt, Request, SamplingParams};

#[derive(Clone, Debug)]
pub struct RunOptions {
    pub model: PathBuf,
    /// Overrides the task's own output budget.
    pub max_tokens: Option<usize>,
    /// 0 = greedy for plain and MTI; entropix sets its own temperatures. A strategy's `t=`
    /// overrides it.
    pub temperature: f32,
    pub seed: u64,
    /// Requests decoded together; all of a job's items when it is at least that many.
    pub max_num_seqs: usize,
    /// Requests per chunk: each chunk is decoded as one batched job, graded, and (with
    /// `resume_dir`) written down before the next starts.
    pub chunk: usize,
    /// Where each strategy's graded chunks are kept; a rerun skips what they hold.
    pub resume_dir: Option<PathBuf>,
}

/// What the runner reports while it works.
#[derive(Clone, Copy, Debug)]
pub enum Progress {
    /// This many requests were already graded by an earlier run (resumed).
    Restored(usize),
    /// One more request finished decoding.
    Decoded,
    /// A chunk's decoding is done; its grading starts.
    Grading,
    /// Grading is done; decoding goes on.
    Graded,
}

/// One request of the job: item `index`'s sample `sample`.
#[derive(Clone, Copy)]
struct Work {
    index: usize,
    sample: usize,
}

pub fn run_strategy(
    task: &dyn Task,
    spec: &StrategySpec,
    options: &RunOptions,
    on_progress: &mut dyn FnMut(Progress),
) -> Result<StrategyResult> {
    let max_tokens = options.max_tokens.unwrap_or_else(|| task.default_max_tokens());
    let temperature = spec.temperature.unwrap_or(options.temperature);
    let (mut checkpoint, mut chunks) = match &options.resume_dir {
        Some(dir) => {
            let key = RunKey {
                model: options.model.display().to_string(),
                task: task.kind().as_str().to_string(),
                strategy: spec.label.clone(),
                items: task.items().len(),
                seed: options.seed,
                max_tokens,
                temperature,
            };
            let path = dir.join(checkpoint::file_name(task.kind().as_str(), &spec.label));
            let (file, chunks) = Checkpoint::open(&path, &key)?;
            (Some(file), chunks)
        }
        None => (None, Vec::new()),
    };
    // Each item's place in the task: restored items are graded by it, and the table lists
    // items in task order whatever order their chunks finished in.
    let position: HashMap<&str, usize> =
        task.items().iter().enumerate().map(|(i, item)| (item.id.as_str(), i)).collect();
    let done = checkpoint::done(&chunks);
    let work: Vec<Work> = (0..task.items().len())
        .flat_map(|index| (0..spec.samples).map(move |sample| Work { index, sample }))
        .filter(|w| !done.contains(&(task.items()[w.index].id.clone(), w.sample)))
        .collect();
    if !chunks.is_empty() {
        on_progress(Progress::Restored(task.items().len() * spec.samples - work.len()));
        on_progress(Progress::Grading);
        regrade(task, &position, &mut chunks)?;
        on_progress(Progress::Graded);
    }

    if !work.is_empty() {
        let mut config = EngineConfig::new(&options.model);
        config.max_num_seqs = options.max_num_seqs.max(1);
        let engine = Engine::start(config)?;
        let params = GenerationParams {
            sampling: SamplingParams {
                temperature,
                top_p: spec.top_p.unwrap_or(SamplingParams::default().top_p),
                seed: Some(options.seed),
                // Several samples per item are also ranked by their mean log-probability
                // (best-of-n), which needs each token's.
                logprobs: if task.reads_first_token() {
                    Some(FIRST_TOKEN_TOP)
                } else {
                    (spec.samples > 1).then_some(0)
                },
                ..SamplingParams::default()
            },
            max_tokens,
            stop: task.stop(),
            decoding: spec.decoding.clone(),
            // Entropix reports its branch only in the metrics; MTI attaches them anyway.
            return_metrics: matches!(spec.decoding, Decoding::Entropix(_)),
            ..GenerationParams::default()
        };
        for part in work.chunks(options.chunk.max(1)) {
            let chunk = run_chunk(&engine, task, &params, part, on_progress)?;
            if let Some(file) = checkpoint.as_mut() {
                file.append(&chunk)?;
            }
            chunks.push(chunk);
        }
        engine.shutdown(entrobatch::ShutdownMode::Abort);
    }

    let mut stats = StrategyStats::default();
    for c in &chunks {
        stats.merge(&c.stats);
    }
    let wall_secs = chunks.iter().map(|c| c.wall_secs).sum();
    let mut items: Vec<ItemResult> = chunks.into_iter().flat_map(|c| c.items).collect();
    items.sort_by_key(|i| (position.get(i.id.as_str()).copied().unwrap_or(usize::MAX), i.sample));
    Ok(summarise(spec, items, wall_secs, stats, options.seed))
}

/// Grades restored items again with the current grader: one table must not mix two
/// graders' verdicts, and grading costs little next to decoding.
fn regrade(task: &dyn Task, position: &HashMap<&str, usize>, chunks: &mut [Chunk]) -> Result<()> {
    for item in chunks.iter_mut().flat_map(|c| c.items.iter_mut()) {
        if let Some(&index) = position.get(item.id.as_str()).filter(|_| item.finish_reason != REJECTED) {
            item.grade = task.grade(index, &item.completion)?;
        }
    }
    Ok(())
}

/// The finish reason recorded for a request the engine refused.
const REJECTED: &str = "rejected";

/// Top log-probabilities read from an answer's first token: OpenAI's maximum, enough to
/// hold every option letter whenever the model means to answer with one.
const FIRST_TOKEN_TOP: usize = 20;

/// Decodes `part` as one batched job, then grades it.
fn run_chunk(
    engine: &Engine,
    task: &dyn Task,
    params: &GenerationParams,
    part: &[Work],
    on_progress: &mut dyn FnMut(Progress),
) -> Result<Chunk> {
    let start = Instant::now();
    // A prompt the engine rejects (too long for the model) is that item's wrong answer,
    // not the end of the run.
    let handles: Vec<_> = part
        .iter()
        .map(|w| {
            let item = &task.items()[w.index];
            let prompt = with_prefix(engine, item, params)?;
            let mut params = params.clone();
            params.sampling.seed = params.sampling.seed.map(|s| s + w.sample as u64);
            engine.submit(Request::new(prompt, params))
        })
        .collect();
    let mut outputs = Vec::with_capacity(handles.len());
    for handle in handles {
        outputs.push(handle.map(|h| h.collect_blocking()).map_err(|e| e.to_string()));
        on_progress(Progress::Decoded);
    }
    let wall_secs = start.elapsed().as_secs_f64();

    on_progress(Progress::Grading);
    let mut stats =
        StrategyStats::from_outputs(outputs.iter().filter_map(|o| o.as_ref().ok()).map(|o| o.tokens.as_slice()));
    for out in outputs.iter().filter_map(|o| o.as_ref().ok()) {
        stats.add_branch(BranchTotals::of_request(out.strategy_stats.as_ref()));
    }
    let mut items = Vec::with_capacity(outputs.len());
    for (w, output) in part.iter().zip(outputs) {
        let item = &task.items()[w.index];
        let record = match output {
            Ok(out) => {
                let grade = task.grade(w.index, &out.text)?;
                let first = first_token_top(engine, &out).and_then(|top| task.first_token_choice(w.index, &top));
                ItemResult {
                    id: item.id.clone(),
                    sample: w.sample,
                    reference: task.reference(w.index),
                    prompt_tokens: out.prompt_token_ids.len(),
                    output_tokens: out.token_ids.len(),
                    extra_tokens: BranchTotals::of_request(out.strategy_stats.as_ref()).map_or(0, |b| b.extra_tokens),
                    mean_logprob: mean_logprob(&out),
                    finish_reason: out.finish_reason.as_str().to_string(),
                    completion: out.text,
                    grade,
                    // No option among the top tokens reads as a wrong answer, not as none.
                    first_token_correct: task.reads_first_token().then(|| first.as_ref().is_some_and(|f| f.1)),
                    first_token_choice: first.map(|f| f.0),
                    error: out.error,
                }
            }
            Err(e) => ItemResult {
                id: item.id.clone(),
                sample: w.sample,
                reference: task.reference(w.index),
                prompt_tokens: 0,
                output_tokens: 0,
                extra_tokens: 0,
                mean_logprob: None,
                finish_reason: REJECTED.into(),
                completion: String::new(),
                grade: Grade::default(),
                first_token_choice: None,
                first_token_correct: None,
                error: Some(e),
            },
        };
        items.push(record);
    }
    on_progress(Progress::Graded);
    Ok(Chunk { wall_secs, stats, items })
}

/// The mean log-probability of the output's tokens, when they carry one.
fn mean_logprob(out: &GenerationOutput) -> Option<f64> {
    let logprobs: Vec<f64> =
        out.tokens.iter().filter_map(|t| t.logprob.as_ref()).map(|l| f64::from(l.logprob)).collect();
    (!logprobs.is_empty() && logprobs.len() == out.tokens.len())
        .then(|| logprobs.iter().sum::<f64>() / logprobs.len() as f64)
}

/// The first generated token's top alternatives as (text, logprob), when they were asked.
fn first_token_top(engine: &Engine, out: &GenerationOutput) -> Option<Vec<(String, f32)>> {
    let logprob = out.tokens.first()?.logprob.as_ref()?;
    logprob.top_logprobs.iter().map(|&(id, lp)| engine.tokenizer().decode(&[id], false).ok().map(|t| (t, lp))).collect()
}

/// The item's prompt, with its assistant prefix appended after the rendered template (as
/// token ids: `Prompt::Chat` always ends at the generation prompt).
fn with_prefix(engine: &Engine, item: &EvalItem, params: &GenerationParams) -> entrobatch::Result<Prompt> {
    let Some(prefix) = &item.assistant_prefix else { return Ok(item.prompt.clone()) };
    let mut ids = engine.tokenize_prompt(&item.prompt, params)?;
    ids.extend(engine.tokenizer().encode(prefix, false)?);
    Ok(Prompt::TokenIds(ids))
}

/// The per-strategy numbers from the graded items (in item order, samples adjacent).
pub fn summarise(
    spec: &StrategySpec,
    items: Vec<ItemResult>,
    wall_secs: f64,
    stats: StrategyStats,
    seed: u64,
) -> StrategyResult {
    let scores = item_scores(&items, |i| i.grade.correct);
    let selected = |pick: fn(&[ItemResult]) -> Option<bool>| -> Option<SelectionResult> {
        let picks: Vec<f64> = items_by_id(&items).map(|samples| pick(samples).map(f64::from)).collect::<Option<_>>()?;
        (spec.samples > 1 && !picks.is_empty())
            .then(|| SelectionResult { accuracy: mean(&picks), ci95: mean_interval(&picks, seed) })
    };
    let best_of_samples = selected(best_by_logprob);
    // Only where the grader reads an answer (not HumanEval's tests).
    let majority_of_samples =
        if items.iter().any(|i| i.grade.extracted.is_some()) { selected(majority_answer) } else { None };
    let first_token: Vec<bool> = items.iter().filter_map(|i| i.first_token_correct).collect();
    let output_tokens: usize = items.iter().map(|i| i.output_tokens).sum();
    StrategyResult {
        label: spec.label.clone(),
        decoding: spec.decoding.clone(),
        n: scores.len(),
        samples: spec.samples,
        correct: items.iter().filter(|i| i.grade.correct).count(),
        accuracy: mean(&scores),
        ci95: mean_interval(&scores, seed),
        pass_at_samples: (spec.samples > 1)
            .then(|| scores.iter().filter(|&&s| s > 0.0).count() as f64 / scores.len().max(1) as f64),
        best_of_samples,
        majority_of_samples,
        paired: None,
        first_token_accuracy: (!first_token.is_empty())
            .then(|| first_token.iter().filter(|&&c| c).count() as f64 / items.len() as f64),
        output_tokens,
        prompt_tokens: items.iter().map(|i| i.prompt_tokens).sum(),
        wall_secs,
        tokens_per_sec: if wall_secs > 0.0 { output_tokens as f64 / wall_secs } else { 0.0 },
        mean_output_len: if items.is_empty() { 0.0 } else { output_tokens as f64 / items.len() as f64 },
        // Per task item, all its samples together: what a method spends on one question.
        mean_decoded_len: items.iter().map(|i| i.output_tokens + i.extra_tokens).sum::<usize>() as f64
            / scores.len().max(1) as f64,
        errors: items.iter().filter(|i| i.error.is_some()).count(),
        stats,
        items,
    }
}

/// The records of each item (consecutive, one id).
fn items_by_id(items: &[ItemResult]) -> impl Iterator<Item = &[ItemResult]> {
    items.chunk_by(|a, b| a.id == b.id)
}

/// Best-of-n: whether the sample with the highest mean log-probability is right; None when a
/// sample has no log-probabilities.
fn best_by_logprob(samples: &[ItemResult]) -> Option<bool> {
    let mut best: Option<(f64, bool)> = None;
    for s in samples {
        let lp = s.mean_logprob?;
        if best.is_none_or(|(b, _)| lp > b) {
            best = Some((lp, s.grade.correct));
        }
    }
    best.map(|(_, correct)| correct)
}

/// Self-consistency: whether the answer most samples read to (the first such on a tie) is
/// right. A sample with no answer does not vote; an item with no vote is wrong.
fn majority_answer(samples: &[ItemResult]) -> Option<bool> {
    let mut votes: Vec<(&str, usize, bool)> = Vec::new();
    for s in samples {
        let Some(answer) = s.grade.extracted.as_deref() else { continue };
        match votes.iter_mut().find(|(a, _, _)| *a == answer) {
            Some(v) => v.1 += 1,
            None => votes.push((answer, 1, s.grade.correct)),
        }
    }
    let mut winner: Option<(usize, bool)> = None;
    for &(_, n, correct) in &votes {
        if winner.is_none_or(|(w, _)| n > w) {
            winner = Some((n, correct));
        }
    }
    Some(winner.is_some_and(|(_, correct)| correct))
}

/// Per item (consecutive records with one id), the share of its samples for which
/// `correct` holds.
pub fn item_scores(items: &[ItemResult], correct: impl Fn(&ItemResult) -> bool) -> Vec<f64> {
    let mut scores = Vec::new();
    let mut run: Option<(&str, usize, usize)> = None;
    for item in items {
        match &mut run {
            Some((id, hits, total)) if *id == item.id.as_str() => {
                *hits += usize::from(correct(item));
                *total += 1;
            }
            _ => {
                if let Some((_, hits, total)) = run {
                    scores.push(hits as f64 / total as f64);
                }
                run = Some((item.id.as_str(), usize::from(correct(item)), 1));
            }
        }
    }
    if let Some((_, hits, total)) = run {
        scores.push(hits as f64 / total as f64);
    }
    scores
}

/// Fills each strategy's paired comparison against the first, item by item.
pub fn compare_with_first(results: &mut [StrategyResult], seed: u64) {
    let Some((first, rest)) = results.split_first_mut() else { return };
    let base = item_scores(&first.items, |i| i.grade.correct);
    let base_ids: Vec<&str> = distinct_ids(&first.items);
    for r in rest {
        let scores = item_scores(&r.items, |i| i.grade.correct);
        if distinct_ids(&r.items) != base_ids {
            tracing::warn!("{} and {} graded different items; no paired comparison", r.label, first.label);
            continue;
        }
        let binary = first.samples == 1 && r.samples == 1;
        r.paired = Some(paired::compare(&first.label, &base, &scores, binary, seed));
    }
}

fn distinct_ids(items: &[ItemResult]) -> Vec<&str> {
    let mut ids: Vec<&str> = items.iter().map(|i| i.id.as_str()).collect();
    ids.dedup();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, sample: usize, correct: bool) -> ItemResult {
        ItemResult {
            id: id.into(),
            sample,
            reference: String::new(),
            completion: String::new(),
            prompt_tokens: 1,
            output_tokens: 1,
            extra_tokens: 0,
            mean_logprob: None,
            finish_reason: "stop".into(),
            grade: Grade { correct, ..Grade::default() },
            first_token_choice: None,
            first_token_correct: None,
            error: None,
        }
    }

    #[test]
    fn best_of_n_takes_the_likeliest_sample_and_majority_the_commonest_answer() {
        let sample = |correct: bool, lp: Option<f64>, answer: Option<&str>| {
            let mut r = record("a", 0, correct);
            r.mean_logprob = lp;
            r.grade.extracted = answer.map(String::from);
            r
        };
        let samples = [
            sample(false, Some(-0.9), Some("7")),
            sample(true, Some(-0.2), Some("8")),
            sample(false, Some(-0.5), Some("7")),
        ];
        assert_eq!(best_by_logprob(&samples), Some(true));
        assert_eq!(majority_answer(&samples), Some(false), "two of three say 7");
        assert_eq!(best_by_logprob(&[sample(true, None, None)]), None, "no logprobs, no ranking");
        assert_eq!(majority_answer(&[sample(true, None, None), sample(false, None, None)]), Some(false));
        let tie = [sample(true, Some(-1.0), Some("8")), sample(false, Some(-1.0), Some("7"))];
        assert_eq!((best_by_logprob(&tie), majority_answer(&tie)), (Some(true), Some(true)), "ties keep the first");
    }

    #[test]
    fn an_item_scores_the_share_of_its_samples_that_are_right() {
        let items = [
            record("a", 0, true),
            record("a", 1, false),
            record("a", 2, true),
            record("b", 0, false),
            record("b", 1, false),
            record("b", 2, false),
            record("c", 0, true),
        ];
        assert_eq!(item_scores(&items, |i| i.grade.correct), vec![2.0 / 3.0, 0.0, 1.0]);
        let spec = crate::strategy_spec::parse_strategy("plain:t=0.8:n=3").unwrap();
        let r = summarise(&spec, items.to_vec(), 1.0, StrategyStats::default(), 0);
        // pass@1 = mean over items of c_i / n (HumanEval's unbiased estimator at k = 1).
        assert!((r.accuracy - (2.0 / 3.0 + 0.0 + 1.0) / 3.0).abs() < 1e-12);
        assert_eq!((r.n, r.correct), (3, 3));
        // pass@3 with 3 samples: the items with any right sample ("a" and "c").
        assert_eq!(r.pass_at_samples, Some(2.0 / 3.0));
        let greedy = crate::strategy_spec::parse_strategy("plain").unwrap();
        assert_eq!(summarise(&greedy, items[..1].to_vec(), 1.0, StrategyStats::default(), 0).pass_at_samples, None);
    }
}
