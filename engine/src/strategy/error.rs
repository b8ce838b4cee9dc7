//! Why a strategy refused a request or failed a step. Build errors are the client's (a 400);
//! step errors fail only their own request.

use entrobatch_sampler::SamplerError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StrategyError {
    /// A parameter out of range; `strategy` and `reason` name it.
    #[error("{strategy}: {reason}")]
    InvalidConfig { strategy: &'static str, reason: String },
    /// The strategy needs something this model does not have.
    #[error("{strategy}: {reason}")]
    Unsupported { strategy: &'static str, reason: String },
    /// WeDLM needs a `[MASK]` token, which only WeDLM checkpoints have (a stock Qwen's 151665
    /// is an ordinary token, so no fallback is taken for it).
    #[error(
        "{strategy}: this model has no mask token: {strategy} needs a WeDLM checkpoint (config.json \
         `model_type` \"wedlm\", with `mask_token_id` or the 151665 fallback); use plain, entropix or mti"
    )]
    NoMaskToken { strategy: &'static str },
    #[error("sampling failed: {0}")]
    Sampling(#[from] SamplerError),
    /// The forward handed the strategy rows it did not ask for (an engine bug, not the client's).
    #[error("{strategy}: {reason}")]
    Internal { strategy: &'static str, reason: String },
    #[error("decoding strategy panicked")]
    Panicked,
}

impl StrategyError {
    pub(crate) fn config(strategy: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidConfig { strategy, reason: reason.into() }
    }

    pub(crate) fn internal(strategy: &'static str, reason: impl Into<String>) -> Self {
        Self::Internal { strategy, reason: reason.into() }
    }
}
