//! Entropy-triggered branching: where the model is unsure of its next token, the engine forks
//! the sequence into a few continuations that share its KV blocks, decodes each for a short
//! lookahead inside the ordinary batch, and keeps the one its scorer rates best (the loop's
//! `branches` module runs them). This strategy is the trigger: it draws the plain token as
//! usual and, at a position whose entropy and varentropy pass the thresholds while the
//! request's branch budget lasts, names the candidates to try, the plain draw first.

use entrobatch_sampler::{entropy_varentropy_nats, BranchScorer, TokenMask, TokenScore};
use serde::{Deserialize, Serialize};

use super::plain::sample_plain;
use super::{SequenceStrategy, StrategyError, StrategyInput, StrategyOutput};
use crate::event::{GeneratedToken, TokenLogprob, TokenMetrics};

/// Per-request branching settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BranchConfig {
    /// Continuations tried at a branch point, the plain choice included (2..=8).
    pub k: usize,
    /// Branch where the next token's entropy, in bits, is at least this...
    pub entropy_threshold: f32,
    /// ...and its varentropy, in bits squared, at least this (0: entropy alone decides).
    pub varentropy_threshold: f32,
    /// Branch points per request.
    pub max_branch_points: usize,
    /// Tokens each continuation decodes before the scorer decides, its first included.
    pub lookahead: usize,
    /// A continuation also ends after a token that ends a line (a code line, a reasoning step).
    pub stop_at_newline: bool,
    pub scorer: BranchScorer,
    /// Tokens the tried continuations may decode over the request's life, beyond its output;
    /// no branch starts that could pass it.
    pub max_extra_tokens: usize,
}

/// The defaults are the setting that gained the most on code within twice greedy's tokens
/// (BENCHMARKS.md, "Entropy-triggered branching"); a higher threshold branches less often, for
/// most of the gain at less compute.
impl Default for BranchConfig {
    fn default() -> Self {
        Self {
            k: 3,
            entropy_threshold: 0.75,
            varentropy_threshold: 0.0,
            max_branch_points: 8,
            lookahead: 24,
            stop_at_newline: true,
            scorer: BranchScorer::MeanLogprob,
            max_extra_tokens: 1024,
        }
    }
}

/// The most continuations a branch point may try.
pub const MAX_BRANCH_K: usize = 8;
/// The longest lookahead, so a branch always settles soon.
pub const MAX_BRANCH_LOOKAHEAD: usize = 256;

impl BranchConfig {
    pub fn validate(&self) -> Result<(), StrategyError> {
        let invalid = |reason: String| Err(StrategyError::InvalidConfig { strategy: "branch", reason });
        if !(2..=MAX_BRANCH_K).contains(&self.k) {
            return invalid(format!("k must be 2..={MAX_BRANCH_K}, got {}", self.k));
        }
        if !(1..=MAX_BRANCH_LOOKAHEAD).contains(&self.lookahead) {
            return invalid(format!("lookahead must be 1..={MAX_BRANCH_LOOKAHEAD}, got {}", self.lookahead));
        }
        for (name, v) in
            [("entropy_threshold", self.entropy_threshold), ("varentropy_threshold", self.varentropy_threshold)]
        {
            if !(v >= 0.0 && v.is_finite()) {
                return invalid(format!("{name} must be a finite number >= 0, got {v}"));
            }
        }
        Ok(())
    }

    /// Extra tokens one branch point may cost: every continuation but the kept one, at most
    /// `lookahead` tokens each.
    fn cost_bound(&self) -> usize {
        (self.k - 1) * self.lookahead
    }
}

/// A branch point: the candidates for the next token, the plain draw first, each with what
/// the scorer reads of it.
#[derive(Clone, Debug)]
pub struct ForkPoint {
    pub candidates: Vec<(GeneratedToken, TokenScore)>,
    /// Of the raw distribution, in bits and bits squared.
    pub entropy: f32,
    pub varentropy: f32,
}

/// How a branch point ended, for the strategy's report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BranchOutcome {
    /// No sequence slot or KV pages were spare: the plain draw was kept.
    NoRoom,
    Started {
        children: usize,
    },
    /// `kept`: the candidate whose continuation won (0: the plain draw).
    Settled {
        kept: usize,
        extra_tokens: usize,
    },
}

pub struct BranchStrategy {
    config: BranchConfig,
    stats: BranchStats,
}

#[derive(Default, Serialize)]
struct BranchStats {
    branch_triggers: usize,
    branch_points: usize,
    branch_no_room: usize,
    branch_children: usize,
    /// Branch points where a continuation other than the plain draw's was kept.
    branch_kept_other: usize,
    /// Tokens decoded by continuations that were not kept: compute beyond the output.
    branch_extra_tokens: usize,
}

impl BranchStrategy {
    pub fn new(config: BranchConfig) -> Result<Self, StrategyError> {
        config.validate()?;
        Ok(Self { config, stats: BranchStats::default() })
    }

    fn may_branch(&self) -> bool {
        self.stats.branch_points < self.config.max_branch_points
            && self.stats.branch_extra_tokens + self.config.cost_bound() <= self.config.max_extra_tokens
    }
}

impl SequenceStrategy for BranchStrategy {
    fn process(&mut self, input: StrategyInput<'_>) -> Result<StrategyOutput, StrategyError> {
        let Some(logits) = input.logits.first() else {
            return Ok(StrategyOutput::default());
        };
        let (token_id, logprob) = sample_plain(&input, logits)?;
        let (h, v) = entropy_varentropy_nats(logits);
        let ln2 = std::f32::consts::LN_2;
        let (entropy, varentropy) = (h / ln2, v / (ln2 * ln2));
        let metrics = input.return_metrics.then(|| TokenMetrics { entropy, varentropy, ..TokenMetrics::default() });
        let token = GeneratedToken { token_id, logprob, metrics };
        let triggered = entropy >= self.config.entropy_threshold && varentropy >= self.config.varentropy_threshold;
        let mut fork = None;
        if triggered {
            self.stats.branch_triggers += 1;
            if self.may_branch() {
                let ids = candidates(logits, input.mask, token_id, self.config.k);
                let candidates: Vec<(GeneratedToken, TokenScore)> = ids
                    .into_iter()
                    .map(|id| {
                        let score = TokenScore::of(logits, id);
                        let logprob = token.logprob.as_ref().map(|lp| TokenLogprob {
                            token_id: id,
                            logprob: score.logprob,
                            top_logprobs: lp.top_logprobs.clone(),
                        });
                        (GeneratedToken { token_id: id, logprob, metrics: token.metrics.clone() }, score)
                    })
                    .collect();
                fork = (candidates.len() >= 2).then_some(ForkPoint { candidates, entropy, varentropy });
            }
        }
        Ok(StrategyOutput { tokens: vec![token], next_scratch_rows: 0, fork })
    }

    fn on_branch(&mut self, outcome: BranchOutcome) {
        let s = &mut self.stats;
        match outcome {
            BranchOutcome::NoRoom => s.branch_no_room += 1,
            BranchOutcome::Started { children } => {
                s.branch_points += 1;
                s.branch_children += children;
            }
            BranchOutcome::Settled { kept, extra_tokens } => {
                s.branch_kept_other += usize::from(kept != 0);
                s.branch_extra_tokens += extra_tokens;
            }
        }
    }

    fn summary(&self) -> Option<serde_json::Value> {
        let mut stats = serde_json::to_value(&self.stats).ok()?;
        stats["strategy"] = "branch".into();
        Some(stats)
    }
}

/// `first`, then the most likely other tokens the mask allows, `k` in all at most.
fn candidates(logits: &[f32], mask: Option<&TokenMask>, first: u32, k: usize) -> Vec<u32> {
    let mut top: Vec<(f32, u32)> = Vec::with_capacity(k);
    for (id, &l) in logits.iter().enumerate() {
        let id = id as u32;
        if id == first || mask.is_some_and(|m| !m.allows(id)) {
            continue;
        }
        if top.len() < k - 1 {
            top.push((l, id));
            top.sort_by(|a, b| b.0.total_cmp(&a.0));
        } else if top.last().is_some_and(|&(worst, _)| l > worst) {
            top.pop();
            let pos = top.partition_point(|&(x, _)| x >= l);
            top.insert(pos, (l, id));
        }
    }
    std::iter::once(first).chain(top.into_iter().map(|(_, id)| id)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_the_draw_then_the_likeliest_allowed() {
        let logits = [0.1, 3.0, 2.0, 5.0, 4.0];
        assert_eq!(candidates(&logits, None, 3, 3), vec![3, 4, 1]);
        assert_eq!(candidates(&logits, None, 1, 3), vec![1, 3, 4], "a sampled draw comes first");
        let mut mask = TokenMask::none(5);
        for id in [0, 2, 3] {
            mask.allow(id);
        }
        assert_eq!(candidates(&logits, Some(&mask), 3, 4), vec![3, 2, 0]);
        assert_eq!(candidates(&logits, Some(&TokenMask::none(5)), 3, 4), vec![3]);
    }

    #[test]
    fn configs_out_of_range_are_refused() {
        assert!(BranchConfig::default().validate().is_ok());
        for bad in [
            BranchConfig { k: 1, ..Default::default() },
            BranchConfig { k: 9, ..Default::default() },
            BranchConfig { lookahead: 0, ..Default::default() },
            BranchConfig { entropy_threshold: f32::NAN, ..Default::default() },
            BranchConfig { varentropy_threshold: -1.0, ..Default::default() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
