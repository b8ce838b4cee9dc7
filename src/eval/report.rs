//! The results of an evaluation: per strategy its accuracy with a bootstrap interval,
//! throughput, output length and own statistics, with every graded item for inspection;
//! written as JSON and rendered as a Markdown table.

use serde::Serialize;

use super::bootstrap::Interval;
use super::stats::StrategyStats;
use super::tasks::{Grade, TaskKind};
use crate::Decoding;

#[derive(Clone, Debug, Serialize)]
pub struct ItemResult {
    pub id: String,
    /// The expected answer (HumanEval: the entry point).
    pub reference: String,
    pub completion: String,
    pub prompt_tokens: usize,
    pub output_tokens: usize,
    pub finish_reason: String,
    #[serde(flatten)]
    pub grade: Grade,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct StrategyResult {
    /// The `--strategies` entry as given.
    pub label: String,
    pub decoding: Decoding,
    pub n: usize,
    pub correct: usize,
    pub accuracy: f64,
    /// 95% percentile bootstrap interval of `accuracy`.
    pub ci95: Interval,
    pub output_tokens: usize,
    /// Prompt tokens prefilled: with short answers (MMLU) they, not decoding, take most of
    /// the time behind `tokens_per_sec`.
    pub prompt_tokens: usize,
    /// Submit of the first item to the end of the last, grading excluded.
    pub wall_secs: f64,
    /// Output tokens over `wall_secs` (prefill time included, as a user would see it).
    pub tokens_per_sec: f64,
    pub mean_output_len: f64,
    /// Items whose request failed or was rejected (counted as wrong).
    pub errors: usize,
    pub stats: StrategyStats,
    pub items: Vec<ItemResult>,
}

#[derive(Clone, Debug, Serialize)]
pub struct EvalReport {
    pub model: String,
    pub task: TaskKind,
    pub items: usize,
    pub limit: Option<usize>,
    pub seed: u64,
    pub max_tokens: usize,
    pub temperature: f32,
    /// Whether HumanEval tests ran without network (`unshare -n`); None for other tasks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_isolated: Option<bool>,
    pub strategies: Vec<StrategyResult>,
}

impl EvalReport {
    /// A Markdown table, one row per strategy, under a line naming the run.
    pub fn markdown(&self) -> String {
        let model = std::path::Path::new(&self.model)
            .file_name()
            .map_or(self.model.clone(), |f| f.to_string_lossy().into_owned());
        let prompt_tokens = self.strategies.first().map_or(0, |s| s.prompt_tokens);
        let mut out = format!(
            "{} on {} ({} items, {:.0} prompt tokens per item, seed {}, max_tokens {}, temperature {})\n\n",
            model,
            self.task.as_str(),
            self.items,
            prompt_tokens as f64 / self.items.max(1) as f64,
            self.seed,
            self.max_tokens,
            self.temperature
        );
        out.push_str("| strategy | accuracy | 95% CI | output tok/s | mean output tokens | strategy stats |\n");
        out.push_str("|---|---:|---:|---:|---:|---|\n");
        for s in &self.strategies {
            let errors = if s.errors > 0 { format!(" ({} errors)", s.errors) } else { String::new() };
            out.push_str(&format!(
                "| {} | {:.1}% ({}/{}){} | {:.1}-{:.1}% | {:.1} | {:.1} | {} |\n",
                s.label.replace('|', "\\|"),
                100.0 * s.accuracy,
                s.correct,
                s.n,
                errors,
                100.0 * s.ci95.low,
                100.0 * s.ci95.high,
                s.tokens_per_sec,
                s.mean_output_len,
                s.stats.summary()
            ));
        }
        out
    }
}
