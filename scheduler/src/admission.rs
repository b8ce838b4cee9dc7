//! Admission: waiting sequences become running ones, first come first served, while a slot
//! (`max_num_seqs`) and the pages for their whole current length are there. Admission only
//! hands out the slot and the prefix cache's blocks; how many of the step's prefill tokens
//! a sequence gets is `prefill_order`'s decision, so a short arrival can pass a long prompt
//! admitted before it without taking its place in the queue for memory.

use crate::prefix_hit::{cacheable_blocks, PrefixHit};
use crate::scheduler::Scheduler;
use crate::seq_blocks::SeqBlocks;
use crate::sequence::{SeqId, SequenceStatus};

impl Scheduler {
    /// Admits from the front of the waiting queue until the sequences admitted in this call
    /// could use the step's `max_prefill` tokens (more would only hold slots and blocks idle),
    /// a slot is missing, or the next one does not fit; returns the admitted ids.
    pub(crate) fn admit_waiting(&mut self, max_prefill: usize) -> Vec<SeqId> {
        let mut admitted = Vec::new();
        let seq_limit = self.tpot_seq_limit();
        let mut claimed = 0usize;
        // Pages promised to those admitted here, which take them only as they compute.
        let mut promised = 0usize;
        while let Some(&id) = self.waiting.front() {
            if claimed >= max_prefill || self.running.len() >= seq_limit {
                break;
            }
            let Some(seq) = self.sequences.get(&id) else {
                self.waiting.pop_front();
                continue;
            };
            let len = seq.num_tokens();
            let bs = self.config.block_size;
            let cacheable_blocks = if seq.skip_prefix_cache { 0 } else { cacheable_blocks(len, bs) };
            let windows = &self.config.kv_group_windows;
            let hit = PrefixHit::find(&self.pool, windows, &seq.token_ids, cacheable_blocks);
            let num_cached = hit.num_blocks * bs;
            let (arrival, lookahead) = (seq.arrival, seq.lookahead_slots);

            // The whole current length must fit beside the watermark, so a long prompt does
            // not start chunking into a pool that would force a preemption right away.
            // Nothing running means nobody to protect, and waiving it there avoids a livelock.
            let hit_ids = hit.held_ids();
            let needed = self.config.pages_for(len + lookahead).saturating_sub(hit_ids.len());
            let available = self.pool.num_free_blocks().saturating_sub(self.pool.num_evictable(&hit_ids));
            let headroom = if self.running.is_empty() { 0 } else { self.config.watermark_blocks() };
            if available < needed + headroom + promised {
                break;
            }
            let blocks = SeqBlocks::from_prefix_hit(&self.pool, windows, &hit);
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
            self.prefix_cache_stats.queries += len as u64;
            self.prefix_cache_stats.hits += num_cached as u64;
            claimed += len - num_cached;
            promised += needed;
            admitted.push(id);
        }
        admitted
    }
}
