//! The evaluation tasks: each loads its items from the data directory (see
//! `scripts/fetch-eval-data`), renders them as chat prompts and grades a completion.

pub mod gsm;
pub mod humaneval;
pub mod mmlu;

use std::path::PathBuf;
use std::str::FromStr;

use anyhow::Result;
use serde::Serialize;

use entrobatch::Prompt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskKind {
    Humaneval,
    GsmSymbolic,
    Mmlu,
}

impl TaskKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::Humaneval => "humaneval",
            TaskKind::GsmSymbolic => "gsm-symbolic",
            TaskKind::Mmlu => "mmlu",
        }
    }
}

impl FromStr for TaskKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "humaneval" => Ok(TaskKind::Humaneval),
            "gsm-symbolic" | "gsm" => Ok(TaskKind::GsmSymbolic),
            "mmlu" => Ok(TaskKind::Mmlu),
            _ => Err(format!("unknown task '{s}' (known: humaneval, gsm-symbolic, mmlu)")),
        }
    }
}

/// One question as the engine sees it.
#[derive(Clone, Debug)]
pub struct EvalItem {
    pub id: String,
    pub prompt: Prompt,
    /// Text the assistant's reply starts with (appended after the chat template's
    /// generation prompt), so the model continues it instead of restating it.
    pub assistant_prefix: Option<String>,
}

/// The verdict on one completion.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Grade {
    pub correct: bool,
    /// What the grader read from the completion (the number, the letter); None when it
    /// found nothing to read. HumanEval leaves it empty.
    pub extracted: Option<String>,
    /// Why a completion failed when that is more than "wrong answer" (a test's error, a
    /// timeout).
    pub detail: Option<String>,
}

pub trait Task: Send + Sync {
    fn kind(&self) -> TaskKind;
    fn items(&self) -> &[EvalItem];
    /// The expected answer of item `index`, for the per-item records.
    fn reference(&self, index: usize) -> String;
    /// Grades the completion of item `index`. Err only when grading itself cannot run
    /// (python missing), never for a wrong answer.
    fn grade(&self, index: usize, completion: &str) -> Result<Grade>;
    /// Output budget that fits the task's answer format.
    fn default_max_tokens(&self) -> usize;
    /// Stop strings that end an answer early (a closed code block).
    fn stop(&self) -> Vec<String> {
        Vec::new()
    }
    /// Whether the answer can also be read from the first generated token's distribution
    /// (then the runner asks for its top log-probabilities).
    fn reads_first_token(&self) -> bool {
        false
    }
    /// The option the first token's top log-probabilities (token text, logprob) favour,
    /// and whether it is right; None when none of the options is among them.
    fn first_token_choice(&self, _index: usize, _top: &[(String, f32)]) -> Option<(String, bool)> {
        None
    }
}

#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Where `scripts/fetch-eval-data` put the files (default `data/eval`).
    pub data_dir: PathBuf,
    /// At most this many items.
    pub limit: Option<usize>,
    /// Picks the subset (HumanEval, MMLU) or generates the problems (GSM-Symbolic).
    pub seed: u64,
    /// Wall-clock limit for one HumanEval test run.
    pub exec_timeout: std::time::Duration,
}

pub fn load_task(kind: TaskKind, options: &LoadOptions) -> Result<Box<dyn Task>> {
    Ok(match kind {
        TaskKind::Humaneval => Box::new(humaneval::HumanEval::load(options)?),
        TaskKind::GsmSymbolic => Box::new(gsm::GsmSymbolic::load(options)?),
        TaskKind::Mmlu => Box::new(mmlu::Mmlu::load(options)?),
    })
}

/// Indices of the items to evaluate: all of them, or a seeded sample of `limit` kept in
/// dataset order (a sample rather than the first `limit`, which may share a theme).
pub fn select(total: usize, limit: Option<usize>, seed: u64) -> Vec<usize> {
    let Some(limit) = limit.filter(|&l| l < total) else { return (0..total).collect() };
    let mut indices: Vec<usize> = (0..total).collect();
    // Partial Fisher-Yates on the sampler's counter RNG (no extra dependency).
    for i in 0..limit {
        let u = entrobatch::sampler::uniform(seed, 0x5e1ec7, i as u64);
        let j = i + ((u * (total - i) as f64) as usize).min(total - i - 1);
        indices.swap(i, j);
    }
    let mut chosen = indices[..limit].to_vec();
    chosen.sort_unstable();
    chosen
}

/// Reads a JSON-lines file into `T`s, naming the file and line on failure.
pub(crate) fn read_jsonl<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Result<Vec<T>> {
    use anyhow::Context;
    let text = std::fs::read_to_string(path).with_context(|| {
        format!("cannot read {}; run `scripts/fetch-eval-data` (or pass --data-dir)", path.display())
    })?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).with_context(|| format!("{} line {}", path.display(), i + 1)))
        .collect()
}

/// A one-message chat prompt: all three tasks ask instruct models through their template.
pub(crate) fn user_prompt(content: String) -> Prompt {
    Prompt::Chat(vec![entrobatch::ChatMessage::new("user", content)])
}
