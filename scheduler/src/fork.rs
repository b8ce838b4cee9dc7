//! Forking a sequence and adopting a child back (entropy branching): a child shares every
//! full KV block of its parent by reference and gets a copy of the partial last one
//! (docs/design/kv-blocks.md, "Forking"); the child whose continuation is kept then replaces
//! its parent, which keeps its id, arrival and queue place.

use crate::block::BlockCopy;
use crate::error::SchedulerError;
use crate::scheduler::Scheduler;
use crate::sequence::{NewSequence, SeqId, Sequence, SequenceStatus};

impl Scheduler {
    /// Sequence slots a fork may take now without holding anyone back: none while a request
    /// waits, so branches only ever use spare room.
    pub fn spare_seq_slots(&self) -> usize {
        if !self.waiting.is_empty() {
            return 0;
        }
        self.config.max_num_seqs.saturating_sub(self.running.len())
    }

    /// The rows of branch continuations this step may carry (`SchedulerConfig::branch_row_share`),
    /// counted from the running sequences that decode: unbounded when every one of them has
    /// forked or is a continuation, since then no request that does not branch is slowed.
    pub(crate) fn fork_child_rows(&self) -> ForkChildRows {
        let mut others = 0;
        let mut bystander = false;
        for seq in self.running.iter().filter_map(|id| self.sequences.get(id)) {
            if seq.is_fork_child || seq.is_prefilling() {
                continue;
            }
            others += seq.num_uncomputed_tokens() + seq.scratch_rows;
            bystander |= !seq.has_forked;
        }
        let limit = if bystander {
            ((self.config.branch_row_share * others as f64).floor() as usize).max(1)
        } else {
            usize::MAX
        };
        ForkChildRows { limit, used: 0 }
    }

    /// Starts `child` as a copy of `parent`, which must be running with every token computed
    /// (between steps, after its last token's logits were used). The child is the latest
    /// arrival, so it is the first preempted. Returns the block copies the model runner must
    /// make before the next forward. Refused, with nothing changed, when no sequence slot is
    /// free or the pool would go under its watermark.
    pub fn fork(&mut self, parent: SeqId, child: SeqId) -> Result<Vec<BlockCopy>, SchedulerError> {
        if self.sequences.contains_key(&child) {
            return Err(SchedulerError::DuplicateId(child));
        }
        let p = self.sequences.get(&parent).ok_or(SchedulerError::UnknownSequence(parent))?;
        let refuse = |reason: &str| SchedulerError::ForkRefused { seq_id: parent, reason: reason.into() };
        let caught_up = p.status == SequenceStatus::Running
            && p.num_computed_tokens == p.num_tokens()
            && p.num_draft_in_flight == 0
            && p.scratch_rows == 0;
        let Some(blocks) = p.blocks.as_ref().filter(|_| caught_up) else {
            return Err(refuse("not running with every token computed"));
        };
        if self.running.len() >= self.config.max_num_seqs {
            return Err(refuse("no free sequence slot"));
        }
        let copies_needed = self.config.kv_group_windows.len();
        if self.pool.num_free_blocks() < self.config.watermark_blocks() + copies_needed {
            return Err(refuse("the KV pool is at its watermark"));
        }
        let (blocks, copies) = blocks.fork(p.num_computed_tokens).ok_or_else(|| refuse("the KV pool is full"))?;
        let request = NewSequence {
            id: child,
            prompt_token_ids: p.token_ids.clone(),
            max_tokens: p.max_tokens,
            skip_prefix_cache: p.skip_prefix_cache,
            ttft_target: None,
        };
        let mut seq = Sequence::new(request, self.next_arrival, self.clock);
        seq.num_prompt_tokens = p.num_prompt_tokens;
        seq.num_computed_tokens = p.num_computed_tokens;
        seq.prefill_len = p.prefill_len;
        seq.num_cached_prompt_tokens = p.num_cached_prompt_tokens;
        seq.status = SequenceStatus::Running;
        seq.blocks = Some(blocks);
        seq.is_fork_child = true;
        self.next_arrival += 1;
        if let Some(p) = self.sequences.get_mut(&parent) {
            p.has_forked = true;
        }
        self.sequences.insert(child, seq);
        self.running.push(child);
        Ok(copies)
    }

    /// `parent` goes on as `child` did: it takes the child's tokens, blocks and progress (its
    /// own blocks go back to the pool), and the child is gone. The parent keeps its id, its
    /// arrival and its count of cached prompt tokens; if exactly one of the two was preempted,
    /// the parent moves to the queue the child was in.
    pub fn adopt(&mut self, parent: SeqId, child: SeqId) -> Result<(), SchedulerError> {
        if parent == child {
            return Ok(());
        }
        if !self.sequences.contains_key(&parent) {
            return Err(SchedulerError::UnknownSequence(parent));
        }
        let c = self.remove(child).ok_or(SchedulerError::UnknownSequence(child))?;
        let Some(p) = self.sequences.get_mut(&parent) else {
            return Err(SchedulerError::UnknownSequence(parent));
        };
        let was = p.status;
        p.token_ids = c.token_ids;
        p.num_computed_tokens = c.num_computed_tokens;
        p.prefill_len = c.prefill_len;
        p.blocks = c.blocks;
        p.status = c.status;
        p.scratch_rows = 0;
        p.draft_token_ids.clear();
        p.num_draft_in_flight = 0;
        let arrival = p.arrival;
        match (was, c.status) {
            (SequenceStatus::Running, SequenceStatus::Waiting) => {
                self.running.retain(|&id| id != parent);
                self.waiting.push_front(parent);
            }
            (SequenceStatus::Waiting, SequenceStatus::Running) => {
                self.waiting.retain(|&id| id != parent);
                let sequences = &self.sequences;
                let pos = self.running.partition_point(|o| sequences.get(o).map_or(0, |s| s.arrival) < arrival);
                self.running.insert(pos, parent);
            }
            _ => {}
        }
        Ok(())
    }
}

/// What is left of a step's rows for branch continuations, taken in running order (oldest
/// branch first, so the branch that started first settles first); a continuation ends within
/// its branch's lookahead, so the ones behind it get their turn.
pub(crate) struct ForkChildRows {
    limit: usize,
    used: usize,
}

impl ForkChildRows {
    /// Takes `rows` for a continuation if they fit; the first one always fits.
    pub(crate) fn take(&mut self, rows: usize) -> bool {
        if self.used > 0 && self.used + rows > self.limit {
            return false;
        }
        self.used += rows;
        true
    }
}
