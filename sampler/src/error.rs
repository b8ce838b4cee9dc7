//! Errors reported per row: one bad row must never take the whole batch down.

/// Why a row could not be sampled, or why a request's parameters were refused.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum SamplerError {
    /// A sampling parameter is outside its allowed range (the message names the range).
    #[error("invalid sampling parameter `{field}`: {message}")]
    InvalidParam { field: &'static str, message: String },

    /// The model produced NaN or ±inf; sampling from it would be meaningless.
    #[error("logits contain a non-finite value (NaN or inf) at index {index}")]
    NonFiniteLogits { index: usize },

    /// A row with no logits at all (vocabulary of size zero).
    #[error("logits row is empty")]
    EmptyLogits,

    /// Penalties (the n-gram ban) removed every token, so nothing can be drawn.
    #[error("every token was banned by the logits processors; nothing left to sample")]
    AllTokensMasked,
}

impl SamplerError {
    /// Shorthand used by `SamplingParams::validate`.
    pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        SamplerError::InvalidParam { field, message: message.into() }
    }
}
