use thiserror::Error;

use crate::strategy::StrategyError;

/// Why the engine refused a request or could not start. Callers (the HTTP server) choose a
/// status from the variant, never from the message.
#[derive(Debug, Error)]
pub enum EngineError {
    /// The client must change `field`.
    #[error("{field}: {reason}")]
    InvalidRequest { field: &'static str, reason: String },
    /// The chat template refused the conversation as given (`raise_exception`: roles out of
    /// order, a message it cannot place); `index` is the first message it refused.
    #[error("messages[{index}]: {reason}")]
    MessageRejected { index: usize, reason: String },
    /// The decoding strategy refused its parameters, or cannot run on this model.
    #[error("decoding: {0}")]
    Strategy(#[from] StrategyError),
    /// The structured-output spec was refused (`is_client_error`), or cannot run here.
    #[error("{0}")]
    Structured(#[from] crate::structured::StructuredError),
    #[error("request needs {needed} tokens but the limit is {limit}: {reason}")]
    NeverFits { needed: usize, limit: usize, reason: String },
    #[error("the engine is at capacity ({0} requests in flight); retry shortly")]
    QueueFull(usize),
    /// Admission estimated the request would wait past its time-to-first-token target.
    #[error(
        "the first token would come about {} ms after the request (the queue ahead, then its own prompt); a {} ms TTFT target admits up to {} ms, keeping the rest for the estimate's error; retry in {} s or at another replica",
        .0.estimated_ttft.as_millis(), .0.target.as_millis(), .0.admitted_up_to.as_millis(), .0.retry_after.as_secs()
    )]
    WouldMissTtft(entrobatch_scheduler::WouldMissTtft),
    /// The model runner's errors name their subject ("model file X: ...", "unsupported
    /// model: ..."), so no prefix is added.
    #[error("{0}")]
    Model(#[from] entrobatch_model_runner::ModelError),
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] entrobatch_model_runner::tokenizer::TokenizerError),
    #[error("scheduler: {0}")]
    Scheduler(#[from] entrobatch_scheduler::SchedulerError),
    #[error("configuration: {0}")]
    Config(String),
    #[error("the engine has shut down")]
    ShutDown,
}

impl EngineError {
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidRequest { field, reason: reason.into() }
    }
}

pub type Result<T> = std::result::Result<T, EngineError>;
