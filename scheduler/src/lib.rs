//! Continuous-batching scheduler for entrobatch, after vLLM V1.
//!
//! There is no prefill or decode phase: each sequence has `token_ids` and
//! `num_computed_tokens`, and every `schedule()` hands out one token budget so that
//! sequences catch up (a decode is one token, a prefill a chunk). KV lives in a pool
//! of fixed-size blocks shared through a hash-chained prefix cache; a sequence that
//! cannot get blocks is preempted and later recomputed. A sequence holds one block table per
//! KV cache group (`SchedulerConfig::kv_group_windows`), and a sliding-window group's table
//! gives back the blocks that left its window. The crate knows nothing about models, tensors
//! or sampling.
//!
//! Engine loop: `add` requests; `schedule()`; run the forward; for every
//! `needs_sample` row, `append_token` the sampled id and/or `finish`; repeat.

mod admission;
mod block;
mod block_pool;
mod block_table;
mod config;
mod draft;
mod error;
mod fork;
mod free_queue;
mod inspect;
mod latency;
mod output;
mod prefill_order;
mod prefill_pace;
mod prefix_hash;
mod prefix_hit;
mod scheduler;
mod seq_blocks;
mod sequence;
mod step_budget;
mod step_cost;
mod updates;

pub use block::{Block, BlockCopy, BlockId, NULL_BLOCK};
pub use config::SchedulerConfig;
pub use draft::DraftOdds;
pub use error::{NeverFitsReason, SchedulerError};
pub use latency::{LatencyTargets, QueueLoad, WouldMissTtft};
pub use output::{ScheduledSequence, SchedulerOutput};
pub use prefix_hash::{hash_block_tokens, BlockHash, PrefixCacheStats};
pub use prefix_hit::PrefixProbe;
pub use scheduler::Scheduler;
pub use sequence::{Appended, FinishReason, NewSequence, SeqId, Sequence, SequenceStatus};
pub use step_cost::{CostModel, StepCost, StepWork};

#[cfg(test)]
mod tests {
    #[test]
    fn scheduler_can_move_to_an_engine_thread() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<super::Scheduler>();
    }
}
