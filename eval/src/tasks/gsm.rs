//! GSM-Symbolic: grade-school word problems generated from reasoning-gym 0.1.25's
//! templates with a fixed seed (by `gsm_symbolic.py`, embedded here and run with python3),
//! graded by exact match on the final number.

use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use super::{user_prompt, EvalItem, Grade, LoadOptions, Task, TaskKind};
use crate::grading::{extract_final_number, numbers, same_number};

const GENERATOR: &str = include_str!("gsm_symbolic.py");

/// Problems generated when no `--limit` is given (reasoning-gym's default dataset size).
pub const DEFAULT_COUNT: usize = 500;

#[derive(Clone, Debug, Deserialize)]
pub struct Problem {
    pub id: String,
    pub question: String,
    pub answer: String,
}

pub struct GsmSymbolic {
    answers: Vec<(String, Option<f64>)>,
    items: Vec<EvalItem>,
}

/// Runs the generator over `dir` (generators_*.py, utils.py, gsm_symbolic.py).
pub fn generate(dir: &std::path::Path, seed: u64, count: usize) -> Result<Vec<Problem>> {
    if !dir.join("utils.py").is_file() {
        bail!("{} lacks the GSM-Symbolic generators; run `scripts/fetch-eval-data`", dir.display());
    }
    let out = Command::new("python3")
        .arg("-c")
        .arg(GENERATOR)
        .arg(dir)
        .arg(seed.to_string())
        .arg(count.to_string())
        .output()
        .context("cannot run python3 (needed to generate GSM-Symbolic problems)")?;
    if !out.status.success() {
        bail!("the GSM-Symbolic generator failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("bad generator line: {l}")))
        .collect()
}

impl GsmSymbolic {
    pub fn load(options: &LoadOptions) -> Result<Self> {
        let count = options.limit.unwrap_or(DEFAULT_COUNT).max(1);
        let problems = generate(&options.data_dir.join("gsm_symbolic"), options.seed, count)?;
        let answers = problems.iter().map(|p| (p.answer.clone(), numbers(&p.answer).first().copied())).collect();
        let items = problems
            .iter()
            .map(|p| EvalItem {
                id: p.id.clone(),
                prompt: user_prompt(instruction(&p.question)),
                assistant_prefix: None,
            })
            .collect();
        Ok(Self { answers, items })
    }
}

/// Worked reasoning helps small models; the fixed last line makes the answer findable.
fn instruction(question: &str) -> String {
    format!(
        "{question}\n\nSolve the problem step by step, then write the final answer on the last \
         line as \"The answer is N.\" with N a number."
    )
}

impl Task for GsmSymbolic {
    fn kind(&self) -> TaskKind {
        TaskKind::GsmSymbolic
    }

    fn items(&self) -> &[EvalItem] {
        &self.items
    }

    fn reference(&self, index: usize) -> String {
        self.answers.get(index).map(|a| a.0.clone()).unwrap_or_default()
    }

    fn grade(&self, index: usize, completion: &str) -> Result<Grade> {
        let Some((text, expected)) = self.answers.get(index) else { bail!("no GSM item {index}") };
        let Some(expected) = expected else { bail!("GSM item {index}: answer {text:?} is not a number") };
        let got = extract_final_number(completion);
        Ok(Grade {
            correct: got.is_some_and(|g| same_number(g, *expected)),
            extracted: got.map(|g| g.to_string()),
            detail: None,
        })
    }

    fn default_max_tokens(&self) -> usize {
        256
    }
}
