//! Errors returned to the caller. Every input-dependent failure is a value, never a panic.

use std::fmt;

use crate::sequence::SeqId;

/// Which limit a request can never satisfy, even running alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NeverFitsReason {
    /// `prompt + max_tokens` is longer than `max_model_len`.
    MaxModelLen,
    /// The blocks for `prompt + max_tokens + lookahead` exceed the whole KV pool.
    KvCacheCapacity,
    /// One token plus the requested scratch rows exceed `max_num_batched_tokens`.
    TokenBudget,
}

impl fmt::Display for NeverFitsReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::MaxModelLen => "longer than max_model_len",
            Self::KvCacheCapacity => "needs more KV slots than the whole block pool holds",
            Self::TokenBudget => "needs more rows than max_num_batched_tokens",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerError {
    #[error("invalid scheduler config: {0}")]
    InvalidConfig(String),

    #[error("invalid request {seq_id}: {reason}")]
    InvalidRequest { seq_id: SeqId, reason: String },

    #[error("request {seq_id} can never be scheduled: {needed_tokens} tokens {reason} (limit {limit})")]
    NeverFits { seq_id: SeqId, needed_tokens: usize, limit: usize, reason: NeverFitsReason },

    #[error("sequence {0} already exists")]
    DuplicateId(SeqId),

    #[error("unknown sequence {0}")]
    UnknownSequence(SeqId),

    #[error("sequence {seq_id} cannot fork now: {reason}")]
    ForkRefused { seq_id: SeqId, reason: String },

    #[error("sequence {seq_id} already produced max_tokens = {max_tokens} tokens")]
    MaxTokensReached { seq_id: SeqId, max_tokens: usize },
}
