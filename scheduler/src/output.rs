//! What one `schedule()` call asks the model runner to compute.

use crate::sequence::SeqId;

/// One forward pass. Rows are laid out sequence by sequence in `scheduled` order.
///
/// Contract with the engine: execute every output (or finish its sequences with
/// `FinishReason::Error`) before calling `schedule()` again; the next call treats
/// the KV of these tokens as written and may share it through the prefix cache.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedulerOutput {
    /// Decodes first (arrival order), then prefill chunks in the order `prefill_order` serves
    /// them.
    pub scheduled: Vec<ScheduledSequence>,
    /// Sequences preempted this step: their blocks are gone and they will recompute
    /// from scratch; drop any per-sequence strategy state.
    pub preempted: Vec<SeqId>,
    /// Query tokens, draft tokens and scratch rows; never above `max_num_batched_tokens`.
    pub num_batched_tokens: usize,
}

impl SchedulerOutput {
    pub fn is_empty(&self) -> bool {
        self.scheduled.is_empty()
    }
}

/// What one sequence runs this step: counts only (vLLM V1's `num_scheduled_tokens`). The
/// tokens, slots and block table stay in the scheduler's `Sequence`, which the batch builder
/// reads in place (`Scheduler::query_token_ids`, `Sequence::slot`, `block_table_ids`), so each
/// reaches the forward batch with one copy and nothing is rebuilt per step here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduledSequence {
    pub seq_id: SeqId,
    /// `num_computed_tokens` before this step: tokens whose KV is already cached.
    pub context_len: usize,
    /// Query tokens: `token_ids[context_len .. context_len + num_query_tokens]`, at positions
    /// `context_len..context_len + num_query_tokens`; the block table covers their slots.
    pub num_query_tokens: usize,
    /// Extra non-token rows granted this step (counted in the budget).
    pub scratch_rows: usize,
    /// Draft tokens to verify after the query tokens: `Sequence::draft_token_ids()[..n]`, at
    /// the positions that follow them, with KV slots like query tokens. Only with
    /// `needs_sample`; `Scheduler::accept_draft` must follow the forward.
    pub num_draft_tokens: usize,
    /// The last query row completes the sequence's tokens, so its logits are sampled;
    /// false for prefill chunks that stop short of the end.
    pub needs_sample: bool,
}

impl ScheduledSequence {
    /// Positions of the query tokens.
    pub fn positions(&self) -> std::ops::Range<usize> {
        self.context_len..self.context_len + self.num_query_tokens
    }

    /// Positions of the draft tokens, right after the query tokens.
    pub fn draft_positions(&self) -> std::ops::Range<usize> {
        let start = self.context_len + self.num_query_tokens;
        start..start + self.num_draft_tokens
    }

    /// Token rows this sequence adds to the forward (query and draft tokens), scratch rows apart.
    pub fn num_token_rows(&self) -> usize {
        self.num_query_tokens + self.num_draft_tokens
    }
}
