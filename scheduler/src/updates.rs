//! Caller-driven changes between steps: new requests, sampled tokens, finishing,
//! aborting, and the hooks strategies use to reserve rows and KV slots.

use crate::error::SchedulerError;
use crate::scheduler::Scheduler;
use crate::sequence::{Appended, FinishReason, NewSequence, SeqId, Sequence, SequenceStatus};

impl Scheduler {
    /// Queues a request, rejecting at once anything that could never run.
    pub fn add(&mut self, seq: NewSequence) -> Result<(), SchedulerError> {
        let invalid = |reason: &str| SchedulerError::InvalidRequest { seq_id: seq.id, reason: reason.into() };
        if self.sequences.contains_key(&seq.id) {
            return Err(SchedulerError::DuplicateId(seq.id));
        }
        if seq.prompt_token_ids.is_empty() {
            return Err(invalid("empty prompt"));
        }
        if seq.max_tokens == 0 {
            return Err(invalid("max_tokens must be > 0"));
        }
        self.config.check_fits(seq.id, seq.prompt_token_ids.len(), seq.max_tokens, 0)?;
        let id = seq.id;
        self.sequences.insert(id, Sequence::new(seq, self.next_arrival, self.clock));
        self.next_arrival += 1;
        self.waiting.push_back(id);
        Ok(())
    }

    /// Records a sampled token; its KV is computed by a later step. The sequence owns the
    /// output's length and its limit, so the answer says whether the limit is now reached.
    pub fn append_token(&mut self, id: SeqId, token: u32) -> Result<Appended, SchedulerError> {
        let seq = self.sequences.get_mut(&id).ok_or(SchedulerError::UnknownSequence(id))?;
        if seq.num_output_tokens() >= seq.max_tokens {
            return Err(SchedulerError::MaxTokensReached { seq_id: id, max_tokens: seq.max_tokens });
        }
        seq.token_ids.push(token);
        let num_output_tokens = seq.num_output_tokens();
        Ok(Appended { num_output_tokens, reached_max_tokens: num_output_tokens >= seq.max_tokens })
    }

    /// Removes the sequence; its blocks return to the pool as its table drops.
    pub fn finish(&mut self, id: SeqId, reason: FinishReason) -> Result<(), SchedulerError> {
        let mut seq = self.remove(id).ok_or(SchedulerError::UnknownSequence(id))?;
        // Only a clean finish vouches for the KV of the last step; after an error it may be garbage.
        if matches!(reason, FinishReason::Stop | FinishReason::Length) {
            seq.cache_computed_blocks();
        }
        tracing::trace!(seq_id = id, ?reason, "finished");
        Ok(())
    }

    /// Drops a waiting or running sequence and frees its blocks; false if unknown.
    pub fn abort(&mut self, id: SeqId) -> bool {
        self.remove(id).is_some()
    }

    pub(crate) fn remove(&mut self, id: SeqId) -> Option<Sequence> {
        let seq = self.sequences.remove(&id)?;
        match seq.status {
            SequenceStatus::Running => {
                self.running.retain(|&x| x != id);
                // A slot is free again: what admission's estimate of a wait counts.
                self.step_cost.observe_finish();
            }
            SequenceStatus::Waiting => self.waiting.retain(|&x| x != id),
        }
        Some(seq)
    }

    /// Non-token rows to add to this sequence's next scheduled forward (replaces any
    /// pending request); they are charged to the token budget and cleared once granted.
    pub fn request_scratch_rows(&mut self, id: SeqId, rows: usize) -> Result<(), SchedulerError> {
        self.config.check_scratch_rows(id, rows)?;
        let seq = self.sequences.get_mut(&id).ok_or(SchedulerError::UnknownSequence(id))?;
        seq.scratch_rows = rows;
        Ok(())
    }

    /// KV slots beyond its scheduled tokens that the sequence's table must cover from
    /// its next schedule on. Kept across preemption.
    pub fn set_lookahead_slots(&mut self, id: SeqId, slots: usize) -> Result<(), SchedulerError> {
        let seq = self.sequences.get_mut(&id).ok_or(SchedulerError::UnknownSequence(id))?;
        self.config.check_fits(id, seq.num_prompt_tokens, seq.max_tokens, slots)?;
        seq.lookahead_slots = slots;
        Ok(())
    }
}
