//! vLLM-V1-style scheduling: one token budget per step, running sequences first,
//! then admission from the waiting queue; preemption frees blocks and recomputes.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use crate::block_pool::BlockPool;
use crate::config::SchedulerConfig;
use crate::error::SchedulerError;
use crate::output::{ScheduledSequence, SchedulerOutput};
use crate::prefill_order::PrefillAllowance;
use crate::prefix_hash::PrefixCacheStats;
use crate::seq_blocks::SeqBlocks;
use crate::sequence::{SeqId, Sequence};
use crate::step_budget::StepBudget;
use crate::step_cost::{CostModel, StepCost, StepWork};

/// The context at which the token caps are priced once the step cost is fitted: about a chat
/// turn with its history, the prompts the caps were sized for (`SchedulerConfig`'s default).
const CAP_PRICED_AT_CONTEXT: usize = 1024;

pub struct Scheduler {
    pub(crate) config: SchedulerConfig,
    pub(crate) pool: BlockPool,
    pub(crate) sequences: HashMap<SeqId, Sequence>,
    pub(crate) waiting: VecDeque<SeqId>,
    /// Kept sorted by arrival so the tail is always the next preemption victim.
    pub(crate) running: Vec<SeqId>,
    pub(crate) next_arrival: u64,
    pub(crate) num_preemptions: u64,
    pub(crate) prefix_cache_stats: PrefixCacheStats,
    pub(crate) step_cost: StepCost,
    /// What the last `schedule()` handed out, priced when the engine reports its duration.
    pub(crate) last_step_work: StepWork,
    /// The oldest prefilling sequence, if it sat out the last step for a shorter prompt's first
    /// token (`prefill_order`); it may not do so twice in a row.
    pub(crate) prefill_yielded_by: Option<SeqId>,
    /// The executed steps' durations, summed (`record_step`): time as the queue sees it, since
    /// nothing waits while no step runs.
    pub(crate) clock: Duration,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig) -> Result<Self, SchedulerError> {
        config.validate()?;
        let pool = BlockPool::new(config.num_blocks, config.block_size, config.enable_prefix_caching);
        Ok(Self {
            config,
            pool,
            sequences: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            next_arrival: 0,
            num_preemptions: 0,
            prefix_cache_stats: PrefixCacheStats::default(),
            step_cost: StepCost::default(),
            last_step_work: StepWork::default(),
            prefill_yielded_by: None,
            clock: Duration::ZERO,
        })
    }

    /// Plans one forward pass: running decodes first, in arrival order (preempting the latest
    /// arrivals when blocks run out); then admission from the waiting queue in its order, unless
    /// something was preempted; then the step's prefill tokens (under both latency targets no
    /// more than the waiting prompts need, `prefill_pace`), shortest remaining prefill first,
    /// with at least half of them kept for the oldest prefilling sequence so that a long prompt
    /// still progresses, at least every other step (`prefill_order`). `num_computed_tokens`
    /// advances here, so every output must be executed before the next call.
    pub fn schedule(&mut self) -> SchedulerOutput {
        self.settle_unreported_drafts();
        // Last step's KV is written by now, so its full blocks can be shared, and the blocks
        // that left a window go back before anyone needs new ones.
        for id in &self.running {
            if let Some(seq) = self.sequences.get_mut(id) {
                seq.commit_computed_blocks();
            }
        }
        let decodes = self.decode_work();
        let allowance = self.paced(self.prefill_allowance(decodes), decodes);
        let mut budget = StepBudget::new(self.config.max_num_batched_tokens, allowance.max_tokens());
        let mut out = SchedulerOutput::default();
        let prefilling = self.schedule_running(&mut budget, &mut out);
        // Admitting right after a preemption would only thrash the pool.
        let admitted = if out.preempted.is_empty() { self.admit_waiting(allowance.max_tokens()) } else { Vec::new() };
        self.schedule_prefills(prefilling, admitted, allowance, &mut budget, &mut out);
        // Drafts take only what decodes and prefill left, so they step aside under load.
        self.grant_drafts(&mut budget, &mut out);
        out.num_batched_tokens = self.config.max_num_batched_tokens - budget.rows();
        self.last_step_work = StepWork::default();
        for row in &out.scheduled {
            self.last_step_work.add(StepWork::span(row.context_len, row.num_token_rows() + row.scratch_rows));
        }
        out
    }

    /// The work of the running sequences that decode (or only catch up on a few tokens).
    pub(crate) fn decode_work(&self) -> StepWork {
        let mut work = StepWork::default();
        let mut fork_child_rows = self.fork_child_rows();
        for seq in self.running.iter().filter_map(|id| self.sequences.get(id)).filter(|s| !s.is_prefilling()) {
            let rows = seq.num_uncomputed_tokens() + seq.scratch_rows;
            if seq.is_fork_child && !fork_child_rows.take(rows) {
                continue;
            }
            work.add(StepWork::span(seq.num_computed_tokens, rows));
        }
        work
    }

    /// The prefill a step may carry beside `decodes`. With a TPOT target and a fitted step
    /// cost, prefill gets the time the step budget (`LatencyTargets::planned_step_time`, under
    /// the target) leaves once the decodes are paid for, each row priced at its depth in its
    /// context (`PrefillAllowance::Seconds`), in a step without decodes too: a request arriving
    /// during a step waits for it, and a whole budget of rows deep in a long prompt is seconds
    /// on a few cores, so an unbounded prefill-only step is what a short prompt arriving beside
    /// a long one would wait for. Without a target the caps hold: a prefill alone takes the
    /// whole step, and beside decodes `max_prefill_tokens_with_decodes`; once the step cost is
    /// fitted, each cap buys the time its rows take at `CAP_PRICED_AT_CONTEXT` (`capped_in_time`).
    pub(crate) fn prefill_allowance(&self, decodes: StepWork) -> PrefillAllowance {
        let rows = self.config.max_num_batched_tokens;
        let free = rows.saturating_sub(decodes.rows);
        let cap = if decodes.rows == 0 { rows } else { self.config.max_prefill_tokens_with_decodes.min(free) };
        match (self.config.latency_targets.planned_step_time(decodes.rows > 0), self.step_cost.model()) {
            (Some(budget), Some(model)) => PrefillAllowance::Seconds {
                left: (budget.as_secs_f64() - model.seconds(decodes)).max(0.0),
                model,
                max_tokens: free,
                min_tokens: self.config.block_size.min(free),
            },
            (None, Some(model)) => self.capped_in_time(cap, model),
            _ => PrefillAllowance::Tokens(cap),
        }
    }

    /// A cap of `cap` prefill tokens, as time: what `cap` rows take at `CAP_PRICED_AT_CONTEXT`
    /// tokens of context. Chunks of prompts within that context get the whole cap, as in tokens;
    /// a chunk deep in a long one attends to every key before it, and at tens of thousands of
    /// tokens a row costs several fresh ones, so the same number of rows would stall every
    /// decode beside it (and a prompt arriving during a prefill-only step) for seconds. At least
    /// a block, so a long prompt always progresses.
    fn capped_in_time(&self, cap: usize, model: CostModel) -> PrefillAllowance {
        PrefillAllowance::Seconds {
            left: model.chunk_seconds(CAP_PRICED_AT_CONTEXT, cap),
            model,
            max_tokens: cap,
            min_tokens: self.config.block_size.min(cap),
        }
    }

    /// The most sequences that may run: `max_num_seqs`, or fewer when a TPOT target and the
    /// fitted step cost say that decoding more at once (each a row at its context, beside a
    /// block of prefill for the shortest and the oldest prompt, or half the budget's time if
    /// that is less) would take a step past the step budget. Never under one, and never under
    /// those already running.
    pub(crate) fn tpot_seq_limit(&self) -> usize {
        let max = self.config.max_num_seqs;
        let (Some(budget), Some(model)) = (self.config.latency_targets.planned_step_time(true), self.step_cost.model())
        else {
            return max;
        };
        let seqs: Vec<&Sequence> = self.running.iter().filter_map(|id| self.sequences.get(id)).collect();
        let mean_context =
            if seqs.is_empty() { 0 } else { seqs.iter().map(|s| s.num_tokens()).sum::<usize>() / seqs.len() };
        // The prefill floors are reserved, but never more than half of what the budget leaves
        // beyond the base: where a row of prefill costs as much as several decodes (a larger
        // model on few cores), two blocks of it alone can reach the target, and reserving all
        // of it would leave one sequence decoding and refuse everyone else.
        let above_base = budget.as_secs_f64() - model.base;
        let floor = model.chunk_seconds(mean_context, 2 * self.config.block_size).min(above_base / 2.0);
        let spare = above_base - floor;
        let per_seq = model.chunk_seconds(mean_context, 1);
        let fits = if per_seq > 0.0 { (spare / per_seq).floor().max(0.0) as usize } else { max };
        fits.max(1).max(seqs.len().min(max)).min(max)
    }

    /// Serves running decodes (and sequences whose scratch rows come with all their pending
    /// tokens) in arrival order, branch continuations within their share of the rows
    /// (`fork_child_rows`); returns the running sequences that are prefilling, whose share of
    /// the step `schedule_prefills` decides.
    fn schedule_running(&mut self, budget: &mut StepBudget, out: &mut SchedulerOutput) -> Vec<SeqId> {
        let mut prefilling_ids = Vec::new();
        let mut fork_child_rows = self.fork_child_rows();
        let mut i = 0;
        while i < self.running.len() && budget.rows() > 0 {
            let id = self.running[i];
            i += 1;
            let Some(seq) = self.sequences.get(&id) else {
                continue;
            };
            let (remaining, scratch, prefilling) = (seq.num_uncomputed_tokens(), seq.scratch_rows, seq.is_prefilling());
            if seq.is_fork_child && !prefilling && remaining > 0 && !fork_child_rows.take(remaining + scratch) {
                continue;
            }
            // Scratch rows (MTI's unconditional rows, a WeDLM window) belong with all of the
            // sequence's pending tokens in one span, so they are granted whole or not at all,
            // possibly with no token at all. Rows that could never fit beside the pending
            // tokens stay pending while the tokens are served, so nothing waits forever.
            let grant = scratch > 0 && remaining + scratch <= self.config.max_num_batched_tokens;
            if prefilling && !grant {
                prefilling_ids.push(id);
                continue;
            }
            let n = if grant {
                if remaining + scratch > budget.rows() {
                    continue;
                }
                remaining
            } else {
                remaining.min(budget.rows())
            };
            if n == 0 && !grant {
                continue;
            }
            let slots = seq.num_computed_tokens + n + seq.lookahead_slots;
            if !self.grow_or_preempt(id, slots, out) {
                break;
            }
            if let Some(scheduled) = self.emit(id, n, grant) {
                budget.take(n + scheduled.scratch_rows);
                out.scheduled.push(scheduled);
            }
        }
        // Preemption took sequences off `running`; they are waiting again.
        prefilling_ids.retain(|id| self.running.contains(id));
        prefilling_ids
    }

    /// Grows `id`'s table to `slots` if the pool has the blocks.
    pub(crate) fn grow(&mut self, id: SeqId, slots: usize) -> bool {
        let Some(seq) = self.sequences.get_mut(&id) else {
            return false;
        };
        let blocks = seq.blocks.get_or_insert_with(|| SeqBlocks::new(&self.pool, &self.config.kv_group_windows));
        blocks.ensure_slots(slots)
    }

    /// Grows `id`'s table to `slots`, preempting the latest arrivals not already scheduled in
    /// this step until it fits. False when `id` itself had to go, or nobody else could.
    pub(crate) fn grow_or_preempt(&mut self, id: SeqId, slots: usize, out: &mut SchedulerOutput) -> bool {
        loop {
            if !self.sequences.contains_key(&id) {
                return false;
            }
            if self.grow(id, slots) {
                return true;
            }
            let scheduled = |v: &SeqId| out.scheduled.iter().any(|r| r.seq_id == *v);
            let Some(pos) = self.running.iter().rposition(|v| !scheduled(v)) else {
                return false;
            };
            let victim = self.running.remove(pos);
            self.preempt(victim);
            out.preempted.push(victim);
            if victim == id {
                return false;
            }
        }
    }

    /// `victim` must already be out of `running`.
    pub(crate) fn preempt(&mut self, victim: SeqId) {
        if let Some(seq) = self.sequences.get_mut(&victim) {
            tracing::debug!(seq_id = victim, num_tokens = seq.num_tokens(), "preempted; will recompute");
            seq.reset_for_recompute();
            self.waiting.push_front(victim);
            self.num_preemptions += 1;
        }
    }

    /// Hands out the next `n` tokens of `id` and advances `num_computed_tokens`; `None` (and
    /// nothing handed out) unless the tokens exist and the table covers their slots.
    pub(crate) fn emit(&mut self, id: SeqId, n: usize, grant_scratch: bool) -> Option<ScheduledSequence> {
        let seq = self.sequences.get_mut(&id)?;
        let context_len = seq.num_computed_tokens;
        let end = context_len + n;
        // Each table covers a prefix of positions, so the last query token's slots vouch for all.
        let blocks = seq.blocks.as_ref()?;
        if end > seq.token_ids.len() || (n > 0 && blocks.num_slots() < end) {
            return None;
        }
        let scheduled = ScheduledSequence {
            seq_id: id,
            context_len,
            num_query_tokens: n,
            scratch_rows: if grant_scratch { std::mem::take(&mut seq.scratch_rows) } else { 0 },
            num_draft_tokens: 0,
            needs_sample: end == seq.token_ids.len(),
        };
        seq.num_computed_tokens = end;
        Some(scheduled)
    }
}
