//! The results of an evaluation: per strategy its accuracy with a bootstrap interval,
//! throughput, output length and own statistics, with every graded item for inspection;
//! written as JSON and rendered as a Markdown table.

use serde::{Deserialize, Serialize};

use super::bootstrap::Interval;
use super::paired::PairedDiff;
use super::stats::StrategyStats;
use super::tasks::{Grade, TaskKind};
use entrobatch::Decoding;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ItemResult {
    pub id: String,
    /// Which of the strategy's `n` samples of the item (0 with one).
    #[serde(default)]
    pub sample: usize,
    /// The expected answer (HumanEval: the entry point).
    pub reference: String,
    pub completion: String,
    pub prompt_tokens: usize,
    pub output_tokens: usize,
    /// Tokens decoded beyond the output (branch continuations not kept).
    #[serde(default)]
    pub extra_tokens: usize,
    /// Mean log-probability of the output's tokens (asked for when an item has several samples).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_logprob: Option<f64>,
    pub finish_reason: String,
    #[serde(flatten)]
    pub grade: Grade,
    /// Tasks with options (MMLU): the option whose letter the first generated token's
    /// distribution rates highest, and whether it is the right one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token_choice: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token_correct: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct StrategyResult {
    /// The `--strategies` entry as given.
    pub label: String,
    pub decoding: Decoding,
    /// Items.
    pub n: usize,
    /// Samples per item (`n=` in the strategy).
    pub samples: usize,
    /// Correct samples, over all items.
    pub correct: usize,
    /// Mean over items of the share of their samples that are correct (pass@1).
    pub accuracy: f64,
    /// 95% percentile bootstrap interval of `accuracy` over items.
    pub ci95: Interval,
    /// With several samples per item (`n=` above 1): the share of items with at least one
    /// right sample, pass@k at k = `samples` (HumanEval's estimator, exact when k = n).
    pub pass_at_samples: Option<f64>,
    /// With several samples per item: picking the one of highest mean log-probability
    /// (best-of-n), and the answer most samples give (self-consistency; tasks whose grader
    /// reads an answer). Accuracy over items with its bootstrap interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_of_samples: Option<SelectionResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub majority_of_samples: Option<SelectionResult>,
    /// Against the run's first strategy, item by item; None for the first itself.
    pub paired: Option<PairedDiff>,
    /// MMLU: accuracy of the answer read from the first token's option log-probabilities
    /// (a property of the model's distribution, not of how the strategy draws from it).
    pub first_token_accuracy: Option<f64>,
    pub output_tokens: usize,
    /// Prompt tokens prefilled: with short answers (MMLU) they, not decoding, take most of
    /// the time behind `tokens_per_sec`.
    pub prompt_tokens: usize,
    /// Submit of the first item to the end of the last, grading excluded.
    pub wall_secs: f64,
    /// Output tokens over `wall_secs` (prefill time included, as a user would see it).
    pub tokens_per_sec: f64,
    pub mean_output_len: f64,
    /// Tokens decoded per task item (all its samples), output and branch continuations not
    /// kept: the compute a method spends on one question.
    pub mean_decoded_len: f64,
    /// Items whose request failed or was rejected (counted as wrong).
    pub errors: usize,
    pub stats: StrategyStats,
    pub items: Vec<ItemResult>,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct SelectionResult {
    pub accuracy: f64,
    pub ci95: Interval,
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
        let first_token = self.strategies.iter().any(|s| s.first_token_accuracy.is_some());
        out.push_str("| strategy | accuracy | 95% CI | vs first (paired 95% CI) | +/- items | McNemar p |");
        out.push_str(if first_token { " option logprob acc. |" } else { "" });
        out.push_str(" output tok/s | mean output tokens | strategy stats |\n");
        out.push_str("|---|---:|---:|---:|---:|---:|");
        out.push_str(if first_token { "---:|" } else { "" });
        out.push_str("---:|---:|---|\n");
        for s in &self.strategies {
            let errors = if s.errors > 0 { format!(" ({} errors)", s.errors) } else { String::new() };
            let (diff, items, p) = match &s.paired {
                Some(d) => (
                    format!("{:+.1} ({:+.1} to {:+.1})", 100.0 * d.mean_diff, 100.0 * d.ci95.low, 100.0 * d.ci95.high),
                    format!("+{} / -{}", d.better, d.worse),
                    d.mcnemar_p.map_or("-".into(), |p| if p < 0.001 { "<0.001".into() } else { format!("{p:.3}") }),
                ),
                None => ("baseline".into(), "-".into(), "-".into()),
            };
            out.push_str(&format!(
                "| {} | {:.1}% ({}/{}){} | {:.1}-{:.1}% | {} | {} | {} |",
                s.label.replace('|', "\\|"),
                100.0 * s.accuracy,
                s.correct,
                s.n * s.samples,
                errors,
                100.0 * s.ci95.low,
                100.0 * s.ci95.high,
                diff,
                items,
                p,
            ));
            if first_token {
                out.push_str(&s.first_token_accuracy.map_or(" - |".into(), |a| format!(" {:.1}% |", 100.0 * a)));
            }
            let mut parts: Vec<String> = Vec::new();
            if let Some(p) = s.pass_at_samples {
                parts.push(format!("pass@{} {:.1}%", s.samples, 100.0 * p));
            }
            for (name, sel) in [("best-of-n by logprob", s.best_of_samples), ("majority", s.majority_of_samples)] {
                if let Some(sel) = sel {
                    parts.push(format!(
                        "{name} {:.1}% ({:.1}-{:.1}%)",
                        100.0 * sel.accuracy,
                        100.0 * sel.ci95.low,
                        100.0 * sel.ci95.high
                    ));
                }
            }
            let rest = s.stats.summary();
            if rest != "-" || parts.is_empty() {
                parts.push(rest);
            }
            let stats = parts.join("; ");
            let decoded = if s.mean_decoded_len > s.mean_output_len {
                format!("{:.1} ({:.1} decoded)", s.mean_output_len, s.mean_decoded_len)
            } else {
                format!("{:.1}", s.mean_output_len)
            };
            out.push_str(&format!(" {:.1} | {decoded} | {} |\n", s.tokens_per_sec, stats));
        }
        out
    }
}
