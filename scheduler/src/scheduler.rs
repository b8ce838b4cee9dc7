//! vLLM-V1-style scheduling: one token budget per step, running sequences first,
//! then admission from the waiting queue; preemption frees blocks and recomputes.

use std::collections::{HashMap, VecDeque};

use crate::block_pool::BlockPool;
use crate::config::SchedulerConfig;
use crate::error::SchedulerError;
use crate::output::{ScheduledSequence, SchedulerOutput};
use crate::prefix_hash::PrefixCacheStats;
use crate::prefix_hit::PrefixHit;
use crate::seq_blocks::SeqBlocks;
use crate::sequence::{SeqId, Sequence, SequenceStatus};
use crate::step_budget::StepBudget;

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
        })
    }

    /// Plans one forward pass. Running sequences are served first in arrival order
    /// (preempting the latest arrivals when blocks run out); waiting ones are admitted
    /// only if nothing was preempted. `num_computed_tokens` advances here, so every
    /// output must be executed before the next call.
    pub fn schedule(&mut self) -> SchedulerOutput {
        // Last step's KV is written by now, so its full blocks can be shared, and the blocks
        // that left a window go back before anyone needs new ones.
        for id in &self.running {
            if let Some(seq) = self.sequences.get_mut(id) {
                seq.commit_computed_blocks();
            }
        }
        let with_decodes = self.running.iter().filter_map(|id| self.sequences.get(id)).any(|s| !s.is_prefilling());
        let mut budget = StepBudget::new(&self.config, with_decodes);
        let mut out = SchedulerOutput::default();
        self.schedule_running(&mut budget, &mut out);
        // Admitting right after a preemption would only thrash the pool.
        if out.preempted.is_empty() {
            self.schedule_waiting(&mut budget, &mut out);
        }
        out.num_batched_tokens = self.config.max_num_batched_tokens - budget.rows();
        out
    }

    fn schedule_running(&mut self, budget: &mut StepBudget, out: &mut SchedulerOutput) {
        let mut i = 0;
        while i < self.running.len() && budget.rows() > 0 {
            let id = self.running[i];
            i += 1;
            let Some(seq) = self.sequences.get(&id) else {
                continue;
            };
            let (remaining, scratch, prefilling) = (seq.num_uncomputed_tokens(), seq.scratch_rows, seq.is_prefilling());
            // Scratch rows (MTI's unconditional rows, a WeDLM window) belong with all of the
            // sequence's pending tokens in one span, so they are granted whole or not at all,
            // possibly with no token at all. Rows that could never fit beside the pending
            // tokens stay pending while the tokens are served, so nothing waits forever.
            let grant = scratch > 0 && remaining + scratch <= self.config.max_num_batched_tokens;
            let n = if grant {
                if remaining + scratch > budget.rows() {
                    continue;
                }
                remaining
            } else if prefilling {
                budget.prefill_grant(remaining)
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
                if prefilling && !grant {
                    budget.take_prefill(n);
                } else {
                    budget.take(n);
                }
                budget.take(scheduled.scratch_rows);
                out.scheduled.push(scheduled);
            }
        }
    }

    /// Grows `id`'s table to `slots`, preempting the latest arrivals until it fits.
    /// False when `id` itself had to go.
    fn grow_or_preempt(&mut self, id: SeqId, slots: usize, out: &mut SchedulerOutput) -> bool {
        loop {
            let Some(seq) = self.sequences.get_mut(&id) else {
                return false;
            };
            let blocks = seq.blocks.get_or_insert_with(|| SeqBlocks::new(&self.pool, &self.config.kv_group_windows));
            if blocks.ensure_slots(slots) {
                return true;
            }
            let Some(victim) = self.running.pop() else {
                return false;
            };
            self.preempt(victim);
            out.preempted.push(victim);
            if victim == id {
                return false;
            }
        }
    }

    /// `victim` must already be out of `running`.
    fn preempt(&mut self, victim: SeqId) {
        if let Some(seq) = self.sequences.get_mut(&victim) {
            tracing::debug!(seq_id = victim, num_tokens = seq.num_tokens(), "preempted; will recompute");
            seq.reset_for_recompute();
            self.waiting.push_front(victim);
            self.num_preemptions += 1;
        }
    }

    fn schedule_waiting(&mut self, budget: &mut StepBudget, out: &mut SchedulerOutput) {
        while let Some(&id) = self.waiting.front() {
            if budget.prefill_grant(1) == 0 || self.running.len() >= self.config.max_num_seqs {
                break;
            }
            let Some(seq) = self.sequences.get(&id) else {
                self.waiting.pop_front();
                continue;
            };
            let len = seq.num_tokens();
            let bs = self.config.block_size;
            // The last token is always recomputed: its logits are needed.
            let cacheable_blocks = if seq.skip_prefix_cache { 0 } else { len.saturating_sub(1) / bs };
            let windows = &self.config.kv_group_windows;
            let hit = PrefixHit::find(&self.pool, windows, &seq.token_ids, cacheable_blocks);
            let num_cached = hit.num_blocks * bs;
            // A sequence being (re)prefilled has no strategy rows to run yet.
            let n = budget.prefill_grant(len - num_cached);
            let lookahead = seq.lookahead_slots;
            let (arrival, prompt_len) = (seq.arrival, len);

            // The whole current length must fit beside the watermark, so a long prompt does
            // not start chunking into a pool that would force a preemption right away.
            // Nothing running means nobody to protect, and waiving it there avoids a livelock.
            let hit_ids = hit.held_ids();
            let needed = self.config.pages_for(len + lookahead).saturating_sub(hit_ids.len());
            let available = self.pool.num_free_blocks().saturating_sub(self.pool.num_evictable(&hit_ids));
            let headroom = if self.running.is_empty() { 0 } else { self.config.watermark_blocks() };
            if available < needed + headroom {
                break;
            }
            let mut blocks = SeqBlocks::from_prefix_hit(&self.pool, windows, &hit);
            if !blocks.ensure_slots(num_cached + n + lookahead) {
                break;
            }
            let Some(seq) = self.sequences.get_mut(&id) else {
                break;
            };
            seq.blocks = Some(blocks);
            seq.num_computed_tokens = num_cached;
            seq.num_cached_prompt_tokens.get_or_insert(num_cached.min(seq.num_prompt_tokens));
            seq.status = SequenceStatus::Running;
            self.waiting.pop_front();
            let sequences = &self.sequences;
            let pos = self.running.partition_point(|o| sequences.get(o).map_or(0, |s| s.arrival) < arrival);
            self.running.insert(pos, id);
            self.prefix_cache_stats.queries += prompt_len as u64;
            self.prefix_cache_stats.hits += num_cached as u64;
            if let Some(scheduled) = self.emit(id, n, false) {
                budget.take_prefill(n);
                out.scheduled.push(scheduled);
            }
        }
    }

    /// Hands out the next `n` tokens of `id` and advances `num_computed_tokens`; `None` (and
    /// nothing handed out) unless the tokens exist and the table covers their slots.
    fn emit(&mut self, id: SeqId, n: usize, grant_scratch: bool) -> Option<ScheduledSequence> {
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
            needs_sample: end == seq.token_ids.len(),
        };
        seq.num_computed_tokens = end;
        Some(scheduled)
    }
}
