//! What a branch's scorer reads from each token of a continuation, and how it ranks them:
//! the mean log-probability of the continuation, or CoT-decoding's confidence margin
//! (Wang & Zhou 2024: the probability of the chosen token over the most likely other one).

use crate::logprobs::logsumexp;
use serde::{Deserialize, Serialize};

/// How a branch picks the continuation it keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BranchScorer {
    /// Mean `ln p(token)` over the continuation, its first token included.
    #[default]
    MeanLogprob,
    /// Mean of `p(token) - max p(other token)` over the continuation: how decided the model
    /// was at each token it took (CoT-decoding's answer confidence, over every token here).
    Margin,
}

impl BranchScorer {
    pub fn name(self) -> &'static str {
        match self {
            Self::MeanLogprob => "mean_logprob",
            Self::Margin => "margin",
        }
    }

    /// The score of a continuation; an empty one scores lowest.
    pub fn score(self, tokens: &[TokenScore]) -> f32 {
        if tokens.is_empty() {
            return f32::NEG_INFINITY;
        }
        let sum: f32 = match self {
            Self::MeanLogprob => tokens.iter().map(|t| t.logprob).sum(),
            Self::Margin => tokens.iter().map(|t| t.margin).sum(),
        };
        sum / tokens.len() as f32
    }
}

/// One token of a continuation as the scorers see it, from the raw distribution it was
/// drawn from (before temperature, penalties or a grammar's mask).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TokenScore {
    /// `ln p(token)`.
    pub logprob: f32,
    /// `p(token) - max over other tokens of p`: positive only for the most likely token.
    pub margin: f32,
}

impl TokenScore {
    /// `logits` must be finite (the engine checks every row before sampling).
    pub fn of(logits: &[f32], token: u32) -> Self {
        let lse = logsumexp(logits);
        let chosen = logits.get(token as usize).copied().unwrap_or(f32::NEG_INFINITY);
        let best_other = logits
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != token as usize)
            .map(|(_, &l)| l)
            .fold(f32::NEG_INFINITY, f32::max);
        let logprob = chosen - lse;
        Self { logprob, margin: logprob.exp() - (best_other - lse).exp() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_follow_their_formulas() {
        // p = softmax([ln 0.5, ln 0.3, ln 0.2]) = [0.5, 0.3, 0.2].
        let logits = [0.5f32.ln(), 0.3f32.ln(), 0.2f32.ln()];
        let top = TokenScore::of(&logits, 0);
        let second = TokenScore::of(&logits, 1);
        assert!((top.logprob - 0.5f32.ln()).abs() < 1e-6 && (top.margin - 0.2).abs() < 1e-6);
        assert!((second.logprob - 0.3f32.ln()).abs() < 1e-6 && (second.margin + 0.2).abs() < 1e-6);
        let path = [top, second];
        assert!((BranchScorer::MeanLogprob.score(&path) - (0.15f32).ln() / 2.0).abs() < 1e-6);
        assert!(BranchScorer::Margin.score(&path).abs() < 1e-6);
        assert_eq!(BranchScorer::Margin.score(&[]), f32::NEG_INFINITY);
    }
}
