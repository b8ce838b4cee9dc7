//! Who gets a step's prefill: the sequence with the fewest tokens left to compute first
//! (shortest remaining prefill), so a short request is not stuck behind a long prompt; but at
//! least half of the step's prefill goes to the oldest prefilling sequence, so a long prompt
//! still progresses and finishes within a bounded multiple of its time alone whatever arrives
//! after it. Once it is done the next oldest has that claim, so nobody waits without bound.
//!
//! One exception gives short requests their first token about as soon as with no long prompt
//! present: while a short prompt (one the whole allowance computes within two steps) cannot
//! finish beside the oldest's claim, the oldest sits out every other step and the short ones
//! get all of it. A chunk deep in a long context costs far more a row than a fresh prompt's
//! (it attends to every key before it), so half a step's time buys a short prompt only a
//! fraction of its rows, and its first token would come steps later. The oldest never sits out
//! two steps in a row: it keeps at least half of every other step, and all of a step with no
//! short prompt waiting.

use crate::output::SchedulerOutput;
use crate::scheduler::Scheduler;
use crate::sequence::SeqId;
use crate::step_budget::StepBudget;
use crate::step_cost::CostModel;

/// How much prefill a step may carry beside its decodes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum PrefillAllowance {
    /// A number of tokens.
    Tokens(usize),
    /// Seconds left within the TPOT target once the decodes are paid for, each prefill row
    /// priced by the fitted step cost at its depth in its context; at most `max_tokens` rows,
    /// and at least `min_tokens` for the first in line, so a prompt always progresses.
    Seconds { left: f64, model: CostModel, max_tokens: usize, min_tokens: usize },
}

impl PrefillAllowance {
    /// The most prefill tokens this allowance can buy.
    pub(crate) fn max_tokens(&self) -> usize {
        match *self {
            Self::Tokens(n) => n,
            Self::Seconds { max_tokens, .. } => max_tokens,
        }
    }

    /// The prefill tokens it buys for one prompt at `context_len` tokens of context.
    pub(crate) fn tokens_at_context(&self, context_len: usize) -> usize {
        self.affordable(context_len, self.total()).max(self.min_tokens()).min(self.max_tokens())
    }

    /// The allowance in its unit: tokens, or seconds.
    fn total(&self) -> f64 {
        match *self {
            Self::Tokens(n) => n as f64,
            Self::Seconds { left, .. } => left,
        }
    }

    /// What a chunk of `n` rows after `context_len` tokens costs, in the allowance's unit.
    fn cost(&self, context_len: usize, n: usize) -> f64 {
        match *self {
            Self::Tokens(_) => n as f64,
            Self::Seconds { model, .. } => model.chunk_seconds(context_len, n),
        }
    }

    /// The longest chunk after `context_len` tokens that `amount` of the unit buys.
    fn affordable(&self, context_len: usize, amount: f64) -> usize {
        match *self {
            Self::Tokens(_) => (amount.max(0.0) + 1e-9).floor() as usize,
            Self::Seconds { model, .. } => model.chunk_within(context_len, amount),
        }
    }

    fn min_tokens(&self) -> usize {
        match *self {
            Self::Tokens(_) => 0,
            Self::Seconds { min_tokens, .. } => min_tokens,
        }
    }
}

/// A prefilling sequence as the order sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PrefillCandidate {
    pub(crate) id: SeqId,
    pub(crate) arrival: u64,
    /// Tokens already computed: where its next row sits in its context.
    pub(crate) context_len: usize,
    /// Tokens it still has to compute before it samples.
    pub(crate) remaining: usize,
}

/// A step's prefill: each chunk granted, in service order, and the oldest prefilling sequence
/// if it sat this step out for a shorter prompt's first token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PrefillPlan {
    pub(crate) grants: Vec<(SeqId, usize)>,
    pub(crate) yielded_by: Option<SeqId>,
}

/// Sizes each candidate's chunk, in service order: shortest remaining first, the oldest's
/// claim (half of the allowance, or what it needs if less) kept until it is served, unless it
/// yields the step (see the module's note); `last_yielded_by` is the sequence that sat out the
/// previous step, which may not do so again. `rows` is the most prefill rows the step has
/// room for.
pub(crate) fn plan_prefill(
    mut candidates: Vec<PrefillCandidate>,
    allowance: PrefillAllowance,
    rows: usize,
    last_yielded_by: Option<SeqId>,
) -> PrefillPlan {
    let Some(oldest) = candidates.iter().min_by_key(|c| c.arrival).copied() else {
        return PrefillPlan::default();
    };
    candidates.sort_by_key(|c| (c.remaining, c.arrival));
    let shortest = candidates[0];
    let kept = grant_with_oldest_kept(&candidates, oldest, allowance, rows);
    let shortest_finishes = kept.iter().any(|&(id, n)| id == shortest.id && n == shortest.remaining);
    // The oldest sitting out brings a short prompt's first token a step sooner; two long
    // prompts keep sharing every step.
    let short = is_short(shortest.remaining, allowance.tokens_at_context(shortest.context_len).min(rows));
    if shortest.id != oldest.id && !shortest_finishes && short && last_yielded_by != Some(oldest.id) {
        let others = candidates.iter().filter(|c| c.id != oldest.id);
        return PrefillPlan { grants: grant_in_order(others, allowance, rows), yielded_by: Some(oldest.id) };
    }
    PrefillPlan { grants: kept, yielded_by: None }
}

/// A prompt with `remaining` tokens is short when two steps of `per_step` prefill tokens
/// compute it: the oldest sits out for it (`plan_prefill`), and admission's wait estimate
/// counts that (`QueueLoad::estimate_wait`).
pub(crate) fn is_short(remaining: usize, per_step: usize) -> bool {
    remaining <= 2 * per_step
}

/// Grants in order until the allowance or the rows run out, the first candidate at least its
/// floor.
fn grant_in_order<'a>(
    candidates: impl Iterator<Item = &'a PrefillCandidate>,
    allowance: PrefillAllowance,
    rows: usize,
) -> Vec<(SeqId, usize)> {
    let (mut left, mut rows_left) = (allowance.total(), rows);
    let mut grants = Vec::new();
    for (i, c) in candidates.enumerate() {
        let floor = if i == 0 { c.remaining.min(allowance.min_tokens()) } else { 0 };
        let n = c.remaining.min(rows_left).min(allowance.affordable(c.context_len, left).max(floor));
        if n > 0 {
            left -= allowance.cost(c.context_len, n);
            rows_left -= n;
            grants.push((c.id, n));
        }
    }
    grants
}

/// Shortest first with the oldest's claim kept, and both the shortest and the oldest at
/// least their floor.
fn grant_with_oldest_kept(
    candidates: &[PrefillCandidate],
    oldest: PrefillCandidate,
    allowance: PrefillAllowance,
    rows: usize,
) -> Vec<(SeqId, usize)> {
    let total = allowance.total();
    let oldest_needs = allowance.cost(oldest.context_len, oldest.remaining);
    let reserve = if candidates[0].id == oldest.id { 0.0 } else { oldest_needs.min(total / 2.0) };
    let (mut left, mut rows_left) = (total, rows);
    let mut oldest_served = false;
    let mut grants = Vec::with_capacity(candidates.len());
    for c in candidates {
        let is_oldest = c.id == oldest.id;
        let spared = if oldest_served || is_oldest { 0.0 } else { reserve };
        oldest_served |= is_oldest;
        let n = c.remaining.min(rows_left).min(allowance.affordable(c.context_len, left - spared));
        if n > 0 {
            left -= allowance.cost(c.context_len, n);
            rows_left -= n;
            grants.push((c.id, n));
        }
    }
    // However little the target leaves, the shortest and the oldest progress by their floor
    // (a block each), so neither a stream of short prompts nor a long one stalls the other.
    for c in [candidates[0], oldest] {
        let floor = c.remaining.min(allowance.min_tokens());
        match grants.iter_mut().find(|(id, _)| *id == c.id) {
            Some((_, n)) if *n < floor => {
                let more = (floor - *n).min(rows_left);
                *n += more;
                rows_left -= more;
            }
            None if floor.min(rows_left) > 0 => {
                let n = floor.min(rows_left);
                rows_left -= n;
                grants.push((c.id, n));
            }
            _ => {}
        }
    }
    grants
}

impl Scheduler {
    /// Gives the prefilling sequences their chunks of this step, sized by `plan_prefill`
    /// over all of them: first those that were running before this step (growing their
    /// tables, preempting only sequences this step has not scheduled when the pool is short),
    /// then those `admitted` in it, unless that preempted someone (admitting beside a
    /// preemption would only thrash the pool; they keep their place and compute next step).
    pub(crate) fn schedule_prefills(
        &mut self,
        running: Vec<SeqId>,
        admitted: Vec<SeqId>,
        allowance: PrefillAllowance,
        budget: &mut StepBudget,
        out: &mut SchedulerOutput,
    ) {
        let candidates: Vec<PrefillCandidate> = running
            .iter()
            .chain(&admitted)
            .filter_map(|id| self.sequences.get(id))
            .map(|s| PrefillCandidate {
                id: s.id,
                arrival: s.arrival,
                context_len: s.num_computed_tokens,
                remaining: s.num_uncomputed_tokens(),
            })
            .collect();
        let plan = plan_prefill(candidates, allowance, budget.prefill_tokens(), self.prefill_yielded_by);
        self.prefill_yielded_by = plan.yielded_by;
        let (old, new): (Vec<_>, Vec<_>) = plan.grants.into_iter().partition(|(id, _)| !admitted.contains(id));
        for (id, n) in old {
            self.schedule_chunk(id, n, true, budget, out);
        }
        if out.preempted.is_empty() {
            for (id, n) in new {
                self.schedule_chunk(id, n, false, budget, out);
            }
        }
    }

    /// `may_preempt`: false for a sequence admitted in this step, which waits a step rather
    /// than push out another.
    fn schedule_chunk(
        &mut self,
        id: SeqId,
        n: usize,
        may_preempt: bool,
        budget: &mut StepBudget,
        out: &mut SchedulerOutput,
    ) {
        let Some(seq) = self.sequences.get(&id) else {
            return;
        };
        let n = budget.prefill_grant(n, 0);
        if n == 0 || !self.running.contains(&id) {
            return;
        }
        let slots = seq.num_computed_tokens + n + seq.lookahead_slots;
        let grown = if may_preempt { self.grow_or_preempt(id, slots, out) } else { self.grow(id, slots) };
        if !grown {
            return;
        }
        if let Some(scheduled) = self.emit(id, n, false) {
            budget.take_prefill(n);
            out.scheduled.push(scheduled);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: SeqId, arrival: u64, remaining: usize) -> PrefillCandidate {
        PrefillCandidate { id, arrival, context_len: 0, remaining }
    }

    /// The grants of a step in which the oldest (id 1 throughout) may not sit out.
    fn kept(candidates: Vec<PrefillCandidate>, allowance: PrefillAllowance) -> Vec<(SeqId, usize)> {
        let plan = plan_prefill(candidates, allowance, 512, Some(1));
        assert_eq!(plan.yielded_by, None);
        plan.grants
    }

    #[test]
    fn shortest_first_with_half_kept_for_the_oldest() {
        let grants = kept(vec![c(1, 0, 30_000), c(2, 5, 200), c(3, 6, 40)], PrefillAllowance::Tokens(64));
        assert_eq!(grants, vec![(3, 32), (1, 32)]);
        let grants = kept(vec![c(1, 0, 30_000), c(2, 5, 20), c(3, 6, 10)], PrefillAllowance::Tokens(64));
        assert_eq!(grants, vec![(3, 10), (2, 20), (1, 34)]);
    }

    #[test]
    fn the_oldest_sits_out_every_other_step_while_a_short_prompt_waits() {
        let long = c(1, 0, 30_000);
        let allowance = PrefillAllowance::Tokens(64);
        // A short prompt (within two steps' allowance) gets the whole step...
        let plan = plan_prefill(vec![long, c(2, 5, 200), c(3, 6, 100)], allowance, 512, None);
        assert_eq!(plan, PrefillPlan { grants: vec![(3, 64)], yielded_by: Some(1) });
        // ...and the step after, the oldest has its half again.
        let plan = plan_prefill(vec![long, c(2, 5, 200), c(3, 6, 36)], allowance, 512, Some(1));
        assert_eq!(plan, PrefillPlan { grants: vec![(3, 32), (1, 32)], yielded_by: None });
        // Only prompts longer than two steps' allowance: the oldest keeps its half every step.
        let plan = plan_prefill(vec![long, c(2, 5, 200)], allowance, 512, None);
        assert_eq!(plan, PrefillPlan { grants: vec![(2, 32), (1, 32)], yielded_by: None });
        // Nor does an oldest that is itself the shortest sit out.
        let plan = plan_prefill(vec![c(1, 0, 10), c(2, 1, 20)], allowance, 512, None);
        assert_eq!(plan.yielded_by, None);
        // The rows the step has room for bound what two steps compute: 100 is not short at 40.
        let plan = plan_prefill(vec![long, c(2, 5, 100)], allowance, 40, None);
        assert_eq!(plan.yielded_by, None);
        assert_eq!(plan_prefill(vec![long, c(2, 5, 100)], allowance, 50, None).yielded_by, Some(1));
    }

    #[test]
    fn an_oldest_that_is_also_shortest_keeps_nothing_back() {
        let grants = kept(vec![c(1, 0, 10), c(2, 1, 10), c(3, 2, 500)], PrefillAllowance::Tokens(64));
        assert_eq!(grants, vec![(1, 10), (2, 10), (3, 44)]);
        // The oldest's claim never exceeds what it needs.
        let grants = kept(vec![c(1, 0, 12), c(2, 1, 5)], PrefillAllowance::Tokens(64));
        assert_eq!(grants, vec![(2, 5), (1, 12)]);
    }

    #[test]
    fn seconds_buy_fewer_rows_deep_in_a_long_context() {
        // 1 ms a row plus 1 ms per thousand keys; 100 ms to spend.
        let model = CostModel { base: 0.0, per_row: 0.001, per_kilo_key: 0.001 };
        let allowance = PrefillAllowance::Seconds { left: 0.1, model, max_tokens: 512, min_tokens: 4 };
        let long = PrefillCandidate { id: 1, arrival: 0, context_len: 9000, remaining: 7000 };
        let short = PrefillCandidate { id: 2, arrival: 1, context_len: 0, remaining: 100 };
        // The short prompt takes what is not kept for the oldest (50 ms: 49 rows at 1 ms and
        // the keys among them); the long one's rows cost 10 ms each: 5 of them.
        assert_eq!(kept(vec![long, short], allowance), vec![(2, 48), (1, 5)]);
        // The step the oldest sits out, the short prompt has all 100 ms: 95 rows.
        let plan = plan_prefill(vec![long, short], allowance, 512, None);
        assert_eq!(plan, PrefillPlan { grants: vec![(2, 95)], yielded_by: Some(1) });
        // Nothing left within the target: the shortest and the oldest still get their floor,
        // and so do they when what they can afford is less.
        let spent = PrefillAllowance::Seconds { left: 0.0, model, max_tokens: 512, min_tokens: 16 };
        assert_eq!(kept(vec![long, short], spent), vec![(2, 16), (1, 16)]);
        let floor = PrefillAllowance::Seconds { left: 0.1, model, max_tokens: 512, min_tokens: 16 };
        assert_eq!(kept(vec![long, short], floor), vec![(2, 48), (1, 16)]);
    }
}
