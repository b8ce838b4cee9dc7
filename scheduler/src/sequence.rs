//! A request as the scheduler sees it: tokens, how many of them have KV, and its blocks.

use std::time::Duration;

use crate::block::BlockId;
use crate::draft::DraftOdds;
use crate::seq_blocks::SeqBlocks;

pub type SeqId = u64;

/// A request handed to `Scheduler::add`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewSequence {
    pub id: SeqId,
    pub prompt_token_ids: Vec<u32>,
    /// Output-token limit.
    pub max_tokens: usize,
    /// Compute every prompt token even where the prefix cache holds it: a request that
    /// scores its prompt needs the logits of every position.
    pub skip_prefix_cache: bool,
    /// The request's own TTFT target, where it set one; otherwise the server's
    /// (`LatencyTargets::ttft`) paces its prefill (`prefill_pace`).
    pub ttft_target: Option<Duration>,
}

/// The output after `Scheduler::append_token`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub num_output_tokens: usize,
    /// The output is `max_tokens` long: the request ends with `FinishReason::Length`.
    pub reached_max_tokens: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
    Abort,
    Error,
}

/// Finished sequences leave the scheduler, so only these two are ever observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SequenceStatus {
    /// Holds no blocks; new, or preempted and waiting to recompute.
    Waiting,
    /// Holds blocks and is served every step it has tokens to catch up on.
    Running,
}

pub struct Sequence {
    pub(crate) id: SeqId,
    pub(crate) token_ids: Vec<u32>,
    pub(crate) num_prompt_tokens: usize,
    /// Tokens whose KV is (or is being written in the current step) in `blocks`.
    pub(crate) num_computed_tokens: usize,
    /// Tokens to compute before the sequence decodes: the prompt, or after a preemption
    /// everything it had.
    pub(crate) prefill_len: usize,
    pub(crate) max_tokens: usize,
    /// Admission order; preemption takes the highest first.
    pub(crate) arrival: u64,
    /// The scheduler's clock (`Scheduler::clock`) when it was added: its first token is due a
    /// TTFT target after it (`prefill_pace`).
    pub(crate) added_at: Duration,
    /// Its own TTFT target, where its request set one.
    pub(crate) ttft_target: Option<Duration>,
    pub(crate) status: SequenceStatus,
    /// One block table per KV cache group while running.
    pub(crate) blocks: Option<SeqBlocks>,
    /// Non-token rows wanted in the next forward that schedules this sequence.
    pub(crate) scratch_rows: usize,
    /// KV slots the table must cover beyond the scheduled tokens.
    pub(crate) lookahead_slots: usize,
    /// Prompt tokens the prefix cache served at first admission (`None` before it).
    pub(crate) num_cached_prompt_tokens: Option<usize>,
    pub(crate) skip_prefix_cache: bool,
    /// Tokens a drafter guesses follow `token_ids`, for the next step to verify.
    pub(crate) draft_token_ids: Vec<u32>,
    /// The drafter's estimate of how the draft will be kept.
    pub(crate) draft_odds: DraftOdds,
    /// Draft tokens the last `schedule()` handed out, counted in `num_computed_tokens` until
    /// `accept_draft` says how many were kept.
    pub(crate) num_draft_in_flight: usize,
    /// A branch continuation (`fork`'s child): it decodes within `branch_row_share`.
    pub(crate) is_fork_child: bool,
    /// It has forked: it is a branching request's, so others' continuations may pass it.
    pub(crate) has_forked: bool,
}

impl Sequence {
    /// `arrival` is its admission order, `added_at` the scheduler's clock now.
    pub(crate) fn new(request: NewSequence, arrival: u64, added_at: Duration) -> Self {
        Self {
            id: request.id,
            num_prompt_tokens: request.prompt_token_ids.len(),
            prefill_len: request.prompt_token_ids.len(),
            token_ids: request.prompt_token_ids,
            num_computed_tokens: 0,
            max_tokens: request.max_tokens,
            arrival,
            added_at,
            ttft_target: request.ttft_target,
            status: SequenceStatus::Waiting,
            blocks: None,
            scratch_rows: 0,
            lookahead_slots: 0,
            num_cached_prompt_tokens: None,
            skip_prefix_cache: request.skip_prefix_cache,
            draft_token_ids: Vec::new(),
            draft_odds: DraftOdds::uniform(0.0),
            num_draft_in_flight: 0,
            is_fork_child: false,
            has_forked: false,
        }
    }

    pub fn id(&self) -> SeqId {
        self.id
    }

    /// Prompt followed by the generated tokens.
    pub fn token_ids(&self) -> &[u32] {
        &self.token_ids
    }

    pub fn num_tokens(&self) -> usize {
        self.token_ids.len()
    }

    pub fn num_prompt_tokens(&self) -> usize {
        self.num_prompt_tokens
    }

    pub fn num_computed_tokens(&self) -> usize {
        self.num_computed_tokens
    }

    pub fn output_token_ids(&self) -> &[u32] {
        &self.token_ids[self.num_prompt_tokens..]
    }

    pub fn num_output_tokens(&self) -> usize {
        self.token_ids.len() - self.num_prompt_tokens
    }

    /// Prompt tokens whose KV came from the prefix cache when the sequence was first
    /// admitted (OpenAI's `usage.prompt_tokens_details.cached_tokens`); 0 before admission.
    pub fn num_cached_prompt_tokens(&self) -> usize {
        self.num_cached_prompt_tokens.unwrap_or(0)
    }

    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    pub fn status(&self) -> SequenceStatus {
        self.status
    }

    /// The block table of KV cache group `group` (`NULL_BLOCK` where a windowed group gave a
    /// block back); empty while waiting.
    pub fn block_table_ids(&self, group: usize) -> &[BlockId] {
        self.blocks.as_ref().map_or(&[], |b| b.ids(group))
    }

    /// KV slot of token `position` in group `group`'s pages, if its block table holds it.
    pub fn slot(&self, group: usize, position: usize) -> Option<i64> {
        self.blocks.as_ref()?.slot(group, position)
    }

    pub fn scratch_rows(&self) -> usize {
        self.scratch_rows
    }

    pub fn lookahead_slots(&self) -> usize {
        self.lookahead_slots
    }

    /// The draft waiting to be verified (`Scheduler::set_draft`).
    pub fn draft_token_ids(&self) -> &[u32] {
        &self.draft_token_ids
    }

    /// Tokens still to compute before the sequence is caught up.
    pub(crate) fn num_uncomputed_tokens(&self) -> usize {
        self.token_ids.len().saturating_sub(self.num_computed_tokens)
    }

    /// Still computing its prompt (or recomputing after a preemption) rather than decoding.
    pub fn is_prefilling(&self) -> bool {
        self.num_computed_tokens < self.prefill_len
    }

    /// Prompt tokens still to compute, running or waiting for a slot: the queue admission
    /// estimates from and the prefill pace serves.
    pub(crate) fn awaits_prefill(&self) -> bool {
        self.is_prefilling() || self.blocks.is_none()
    }

    /// Registers the full blocks whose KV earlier steps wrote.
    pub(crate) fn cache_computed_blocks(&mut self) {
        if let Some(blocks) = self.blocks.as_mut() {
            blocks.cache_full_blocks(&self.token_ids, self.num_computed_tokens);
        }
    }

    /// Once earlier steps are committed: registers their full blocks, then gives back the
    /// blocks that left every window.
    pub(crate) fn commit_computed_blocks(&mut self) {
        if let Some(blocks) = self.blocks.as_mut() {
            blocks.cache_full_blocks(&self.token_ids, self.num_computed_tokens);
            blocks.release_outside_window(self.num_computed_tokens);
        }
    }

    /// Back to waiting with nothing computed; generated tokens stay and are recomputed.
    pub(crate) fn reset_for_recompute(&mut self) {
        self.blocks = None;
        self.num_computed_tokens = 0;
        self.prefill_len = self.token_ids.len();
        self.status = SequenceStatus::Waiting;
        // Scratch rows and drafts belong to per-step state the engine discards on preemption.
        self.scratch_rows = 0;
        self.draft_token_ids.clear();
        self.num_draft_in_flight = 0;
    }
}

impl std::fmt::Debug for Sequence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sequence")
            .field("id", &self.id)
            .field("num_tokens", &self.token_ids.len())
            .field("num_prompt_tokens", &self.num_prompt_tokens)
            .field("num_computed_tokens", &self.num_computed_tokens)
            .field("max_tokens", &self.max_tokens)
            .field("status", &self.status)
            .field(
                "block_tables",
                &self.blocks.as_ref().map(|b| b.tables().iter().map(|t| t.ids()).collect::<Vec<_>>()),
            )
            .finish()
    }
}
