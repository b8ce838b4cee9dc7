//! Read-only views of the scheduler for the engine, metrics and tests.

use std::collections::{HashMap, HashSet};

use crate::block::{Block, BlockId};
use crate::config::SchedulerConfig;
use crate::output::ScheduledSequence;
use crate::prefix_hash::PrefixCacheStats;
use crate::scheduler::Scheduler;
use crate::sequence::{SeqId, Sequence, SequenceStatus};

impl Scheduler {
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    pub fn get(&self, id: SeqId) -> Option<&Sequence> {
        self.sequences.get(&id)
    }

    /// KV slot of token `position` of `id` in group `group`'s pages, if its block table holds it.
    pub fn slot(&self, id: SeqId, group: usize, position: usize) -> Option<i64> {
        self.sequences.get(&id)?.slot(group, position)
    }

    /// The query tokens of a row of the last `schedule()`, read in place (empty if the
    /// sequence has gone).
    pub fn query_token_ids(&self, row: &ScheduledSequence) -> &[u32] {
        self.sequences.get(&row.seq_id).and_then(|s| s.token_ids.get(row.positions())).unwrap_or(&[])
    }

    /// The draft tokens of a row of the last `schedule()`, after its query tokens.
    pub fn draft_token_ids(&self, row: &ScheduledSequence) -> &[u32] {
        self.sequences.get(&row.seq_id).and_then(|s| s.draft_token_ids.get(..row.num_draft_tokens)).unwrap_or(&[])
    }

    /// The KV slot of each query token of `row` in group `group` (tests and inspection; the
    /// batch builder writes them straight into the forward batch).
    pub fn slot_mapping(&self, row: &ScheduledSequence, group: usize) -> Option<Vec<i64>> {
        let seq = self.sequences.get(&row.seq_id)?;
        row.positions().map(|p| seq.slot(group, p)).collect()
    }

    /// Free blocks, counting cached blocks no sequence holds (they are evicted on demand).
    pub fn num_free_blocks(&self) -> usize {
        self.pool.num_free_blocks()
    }

    pub fn num_total_blocks(&self) -> usize {
        self.pool.num_total_blocks()
    }

    /// Blocks currently registered in the prefix cache, held or not.
    pub fn num_cached_blocks(&self) -> usize {
        self.pool.num_cached_blocks()
    }

    /// A copy of one block's bookkeeping.
    pub fn block(&self, id: BlockId) -> Option<Block> {
        self.pool.block(id)
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Running sequences in arrival order.
    pub fn running_ids(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.running.iter().copied()
    }

    /// Waiting sequences in admission order (preempted ones at the front).
    pub fn waiting_ids(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.waiting.iter().copied()
    }

    /// Cumulative.
    pub fn num_preemptions(&self) -> u64 {
        self.num_preemptions
    }

    pub fn prefix_cache_stats(&self) -> PrefixCacheStats {
        self.prefix_cache_stats
    }

    pub fn has_unfinished(&self) -> bool {
        !self.sequences.is_empty()
    }

    /// Cross-checks queues, sequences, block tables and the pool; O(sequences + blocks).
    /// For tests and debug assertions in the engine.
    pub fn check_invariants(&self) -> Result<(), String> {
        let running: HashSet<SeqId> = self.running.iter().copied().collect();
        let waiting: HashSet<SeqId> = self.waiting.iter().copied().collect();
        if running.len() != self.running.len() || waiting.len() != self.waiting.len() {
            return Err("a sequence is queued twice".into());
        }
        if let Some(id) = running.intersection(&waiting).next() {
            return Err(format!("sequence {id} is both running and waiting"));
        }
        if running.len() + waiting.len() != self.sequences.len() {
            return Err("queues and sequence map disagree".into());
        }
        if self.running.len() > self.config.max_num_seqs {
            return Err("more running sequences than max_num_seqs".into());
        }
        let arrivals: Vec<u64> =
            self.running.iter().filter_map(|id| self.sequences.get(id)).map(|s| s.arrival).collect();
        if arrivals.windows(2).any(|w| w[0] >= w[1]) {
            return Err("running is not in arrival order".into());
        }
        let mut holders: HashMap<BlockId, usize> = HashMap::new();
        for (&id, seq) in &self.sequences {
            let queued_as = if running.contains(&id) { SequenceStatus::Running } else { SequenceStatus::Waiting };
            if seq.status != queued_as || (!running.contains(&id) && !waiting.contains(&id)) {
                return Err(format!("sequence {id} status {:?} does not match its queue", seq.status));
            }
            if seq.num_computed_tokens > seq.num_tokens() + seq.num_draft_in_flight
                || seq.num_output_tokens() > seq.max_tokens
            {
                return Err(format!("sequence {id} counters out of range: {seq:?}"));
            }
            match (&seq.blocks, seq.status) {
                (None, SequenceStatus::Waiting) if seq.num_computed_tokens == 0 => {}
                (Some(blocks), SequenceStatus::Running) => {
                    if blocks.num_slots() < seq.num_computed_tokens {
                        return Err(format!("sequence {id} computed past its block table"));
                    }
                    if blocks.tables().len() != self.config.kv_group_windows.len() {
                        return Err(format!("sequence {id} has a table count unlike the KV cache groups'"));
                    }
                    let held: Vec<BlockId> = blocks.tables().iter().flat_map(|t| t.held_ids()).collect();
                    let distinct: HashSet<BlockId> = held.iter().copied().collect();
                    if distinct.len() != held.len() {
                        return Err(format!("sequence {id} holds a block twice"));
                    }
                    for (table, window) in blocks.tables().iter().zip(&self.config.kv_group_windows) {
                        // What the next token to compute attends to (a step in flight may read
                        // earlier keys; `check_output` in the tests checks those).
                        let first_needed = window.map_or(0, |w| {
                            crate::block_table::first_needed_block(seq.num_computed_tokens, w, self.config.block_size)
                        });
                        let needed = seq.num_computed_tokens.div_ceil(self.config.block_size);
                        if table.ids()[first_needed.min(needed)..needed].contains(&crate::block::NULL_BLOCK) {
                            return Err(format!("sequence {id} gave back a block its window still reads"));
                        }
                    }
                    for b in held {
                        *holders.entry(b).or_default() += 1;
                    }
                }
                _ => return Err(format!("sequence {id} table does not match status {:?}", seq.status)),
            }
        }
        self.pool.check(&holders)
    }
}
