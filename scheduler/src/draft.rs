//! Speculative drafts: tokens a drafter guesses follow a decoding sequence, verified as extra
//! token rows of its next forward. Their KV is written to the slots after the sequence's
//! tokens like any prefill chunk; `accept_draft` then keeps the verified prefix and rolls the
//! rest back (`num_computed_tokens` moves back, blocks left empty return to the pool). A
//! rejected token was never computed, so no block holding one is ever hashed.

use crate::error::SchedulerError;
use crate::output::SchedulerOutput;
use crate::scheduler::Scheduler;
use crate::sequence::SeqId;
use crate::step_budget::StepBudget;
use crate::step_cost::{CostModel, StepWork};

/// A drafter's estimate of how a draft will be kept. The first token is told apart: a draft
/// starts where the last one broke off or where a fresh match begins, and is rejected there
/// far more often than once it has been followed for a token (a copy, once on track, stays on
/// it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DraftOdds {
    /// The chance the first draft token is kept.
    pub first: f64,
    /// The chance each later draft token is kept given the one before it was.
    pub next: f64,
}

impl DraftOdds {
    /// Every token kept with the same chance given the one before.
    pub fn uniform(acceptance: f64) -> Self {
        Self { first: acceptance, next: acceptance }
    }

    fn clamped(self) -> Self {
        Self { first: self.first.clamp(0.0, 1.0), next: self.next.clamp(0.0, 1.0) }
    }

    /// The chance that draft token `j` (from 0) is kept given that token `j - 1` was.
    fn at(&self, j: usize) -> f64 {
        if j == 0 {
            self.first
        } else {
            self.next
        }
    }
}

impl Scheduler {
    /// Proposes `token_ids` to follow `id`'s tokens in its next scheduled step (replacing any
    /// earlier draft); the step grants the `j`-th token only while the chance that it and every
    /// token before it are kept is worth its row (`grant_drafts`).
    pub fn set_draft(&mut self, id: SeqId, token_ids: Vec<u32>, odds: DraftOdds) -> Result<(), SchedulerError> {
        let seq = self.sequences.get_mut(&id).ok_or(SchedulerError::UnknownSequence(id))?;
        seq.draft_token_ids = token_ids;
        seq.draft_odds = odds.clamped();
        Ok(())
    }

    /// After the forward that verified `id`'s draft: the first `num_accepted` draft tokens are
    /// kept (their KV is the sequence's from now on; the caller appends them with
    /// `append_token`), the rest are forgotten with the blocks they alone occupied.
    pub fn accept_draft(&mut self, id: SeqId, num_accepted: usize) -> Result<(), SchedulerError> {
        let seq = self.sequences.get_mut(&id).ok_or(SchedulerError::UnknownSequence(id))?;
        let in_flight = std::mem::take(&mut seq.num_draft_in_flight);
        if num_accepted > in_flight {
            seq.num_computed_tokens -= in_flight;
            seq.draft_token_ids.clear();
            return Err(SchedulerError::InvalidRequest {
                seq_id: id,
                reason: format!("{num_accepted} draft tokens accepted of {in_flight} verified"),
            });
        }
        seq.num_computed_tokens -= in_flight - num_accepted;
        seq.draft_token_ids.clear();
        let keep = seq.num_computed_tokens + seq.lookahead_slots;
        if let Some(blocks) = seq.blocks.as_mut() {
            blocks.truncate(keep);
        }
        Ok(())
    }

    /// Drafts nobody reported on count as all rejected: their KV is not trusted.
    pub(crate) fn settle_unreported_drafts(&mut self) {
        let unreported: Vec<SeqId> = self
            .running
            .iter()
            .copied()
            .filter(|id| self.sequences.get(id).is_some_and(|s| s.num_draft_in_flight > 0))
            .collect();
        for id in unreported {
            tracing::warn!(seq_id = id, "draft verified without accept_draft; rolled back");
            let _ = self.accept_draft(id, 0);
        }
    }

    /// Adds draft tokens to this step's sampling rows from the rows the budget has left. A
    /// draft token is worth its row when the tokens it is expected to add per second of the
    /// step's time it costs beat the step's rate so far: at batch 1 a row costs a small part
    /// of a weight-bound step and most drafts go in; at a full batch only near-certain ones do,
    /// with no threshold to switch on or off at. The step's rate counts every token it
    /// computes, prompt chunks' too: a draft that lengthens a step carrying prefill delays the
    /// prompts behind it, and with them the requests that would decode next.
    pub(crate) fn grant_drafts(&mut self, budget: &mut StepBudget, out: &mut SchedulerOutput) {
        let wanted = out.scheduled.iter().any(|row| {
            row.needs_sample
                && row.num_query_tokens > 0
                && row.scratch_rows == 0
                && self.sequences.get(&row.seq_id).is_some_and(|s| !s.draft_token_ids.is_empty())
        });
        if !wanted {
            return;
        }
        let model = self.step_cost.model();
        let (mut work, mut tokens) = (StepWork::default(), 0);
        for row in &out.scheduled {
            work.add(StepWork::span(row.context_len, row.num_query_tokens + row.scratch_rows));
            tokens += row.num_query_tokens;
        }
        let mut rate = DraftRate::new(model, work, tokens);
        for i in 0..out.scheduled.len() {
            let row = out.scheduled[i];
            if !row.needs_sample || row.num_query_tokens == 0 || row.scratch_rows > 0 || budget.rows() == 0 {
                continue;
            }
            let Some(seq) = self.sequences.get(&row.seq_id) else { continue };
            // The bonus token after a fully accepted draft is an output token too.
            let room = seq.max_tokens.saturating_sub(seq.num_output_tokens() + 1);
            let cap = seq.draft_token_ids.len().min(room).min(budget.rows());
            let context = row.context_len + row.num_query_tokens;
            let lookahead = seq.lookahead_slots;
            let mut n = rate.grant(context, cap, seq.draft_odds);
            // Short of blocks, a draft keeps to the slots its table already has: it never
            // preempts anyone.
            if n > 0 && !self.grow(row.seq_id, context + n + lookahead) {
                let held = self.sequences.get(&row.seq_id).and_then(|s| s.blocks.as_ref()).map_or(0, |b| b.num_slots());
                n = n.min(held.saturating_sub(context + lookahead));
            }
            if n == 0 {
                continue;
            }
            let Some(seq) = self.sequences.get_mut(&row.seq_id) else { continue };
            seq.num_computed_tokens += n;
            seq.num_draft_in_flight = n;
            out.scheduled[i].num_draft_tokens = n;
            budget.take(n);
        }
    }
}

/// The step's expected output tokens and duration as drafts are added to it.
struct DraftRate {
    model: Option<CostModel>,
    seconds: f64,
    tokens: f64,
}

impl DraftRate {
    /// `tokens`: the tokens the step computes before drafts (decodes and prompt chunks).
    fn new(model: Option<CostModel>, work: StepWork, tokens: usize) -> Self {
        let seconds = model.map_or(0.0, |m| m.seconds(work));
        Self { model, seconds, tokens: tokens as f64 }
    }

    /// How many of `cap` draft tokens after `context` tokens are worth their rows. Before the
    /// step cost is fitted every draft is tried: the first steps are what fits it.
    fn grant(&mut self, context: usize, cap: usize, odds: DraftOdds) -> usize {
        let Some(model) = self.model else { return cap };
        let mut reach = 1.0;
        for j in 0..cap {
            reach *= odds.at(j);
            let cost = model.chunk_seconds(context + j, 1);
            // Expected tokens per second of this row against the step's rate with it left out.
            if cost > 0.0 && self.seconds > 0.0 && reach / cost < self.tokens / self.seconds {
                return j;
            }
            self.seconds += cost;
            self.tokens += reach;
        }
        cap
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::SchedulerConfig;
    use crate::sequence::NewSequence;

    fn model(base: f64, per_row: f64) -> CostModel {
        CostModel { base, per_row, per_kilo_key: 0.0 }
    }

    #[test]
    fn a_weight_bound_step_takes_likely_drafts_and_a_full_one_only_near_certain_ones() {
        // One sequence, a 10 ms step, 0.5 ms a row: a token kept with probability 0.6^j pays
        // while 0.6^j / 0.5 ms beats the step's rate (about 1/10 ms and rising).
        let mut alone = DraftRate::new(Some(model(0.0095, 0.0005)), StepWork { rows: 1, kilo_keys: 0.0 }, 1);
        let n = alone.grant(100, 8, DraftOdds::uniform(0.6));
        assert!((3..8).contains(&n), "{n} of 8 drafts granted to a lone sequence");
        // 64 sequences: the step already makes a token per 0.65 ms of its 41.5 ms.
        let mut full = DraftRate::new(Some(model(0.0095, 0.0005)), StepWork { rows: 64, kilo_keys: 0.0 }, 64);
        assert_eq!(full.grant(100, 8, DraftOdds::uniform(0.6)), 0);
        let mut certain = DraftRate::new(Some(model(0.0095, 0.0005)), StepWork { rows: 64, kilo_keys: 0.0 }, 64);
        assert!(certain.grant(100, 8, DraftOdds::uniform(0.99)) >= 4, "near-certain drafts still pay at a full batch");
    }

    #[test]
    fn a_doubtful_first_token_holds_back_a_draft_that_would_then_be_certain() {
        let full = || DraftRate::new(Some(model(0.0095, 0.0005)), StepWork { rows: 64, kilo_keys: 0.0 }, 64);
        // 0.7 kept for the first token, 0.99 for the rest: worth less than a decoded token's
        // share of a full batch (0.65 ms a token, 0.5 ms a row: a row must add 0.77 tokens)
        // from the first row on.
        assert_eq!(full().grant(100, 8, DraftOdds { first: 0.7, next: 0.99 }), 0);
        let sure_start = full().grant(100, 8, DraftOdds { first: 0.99, next: 0.99 });
        assert!(sure_start >= 4, "{sure_start}");
        // A sure first token and a doubtful rest: the first row alone.
        assert_eq!(full().grant(100, 8, DraftOdds { first: 0.99, next: 0.5 }), 1);
    }

    /// A scheduler whose step cost is fitted as 6 ms + 0.5 ms a row, with sequence 1 decoding
    /// a draft of 8 tokens kept with probability `acceptance` each, and, if `prompt_beside`,
    /// sequence 2's prompt of that length waiting to be prefilled.
    fn drafting(acceptance: f64, prompt_beside: Option<usize>) -> Scheduler {
        let config = SchedulerConfig { block_size: 4, num_blocks: 256, ..SchedulerConfig::default() };
        let mut s = Scheduler::new(config).unwrap();
        let seq = |id, len| NewSequence {
            id,
            prompt_token_ids: vec![7; len],
            max_tokens: 64,
            skip_prefix_cache: true,
            ttft_target: None,
        };
        s.add(seq(1, 6)).unwrap();
        s.schedule();
        s.append_token(1, 9).unwrap();
        for i in 0..64 {
            let rows = 1 + (i * 37) % 120;
            s.step_cost
                .observe(StepWork { rows, kilo_keys: 0.0 }, Duration::from_secs_f64(0.006 + 0.0005 * rows as f64));
        }
        if let Some(len) = prompt_beside {
            s.add(seq(2, len)).unwrap();
        }
        s.set_draft(1, (10..18).collect(), DraftOdds::uniform(acceptance)).unwrap();
        s
    }

    fn drafts_granted(mut s: Scheduler) -> usize {
        s.schedule().scheduled.iter().map(|r| r.num_draft_tokens).sum()
    }

    #[test]
    fn a_step_carrying_prefill_takes_only_the_drafts_that_beat_its_prompt_tokens() {
        // Alone, the 6.5 ms step makes one token, and likely drafts pay for their rows.
        assert!(drafts_granted(drafting(0.7, None)) >= 3);
        // Beside a 64-token chunk of a prompt the step computes 65 tokens in 38.5 ms: a row
        // whose token is kept 7 times in 10 would slow that work down.
        assert_eq!(drafts_granted(drafting(0.7, Some(200))), 0);
        assert!(drafts_granted(drafting(0.999, Some(200))) >= 1, "near-certain drafts still pay");
    }

    #[test]
    fn before_the_cost_is_known_every_draft_is_tried() {
        let mut rate = DraftRate::new(None, StepWork { rows: 1, kilo_keys: 0.0 }, 1);
        assert_eq!(rate.grant(10, 5, DraftOdds::uniform(0.1)), 5);
    }
}
