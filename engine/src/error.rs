use thiserror::Error;

#[derive(Debug, Error)]
pub enum EngineError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("request needs {needed} tokens but the limit is {limit}: {reason}")]
    NeverFits { needed: usize, limit: usize, reason: String },
    #[error("the engine's waiting queue is full ({0} requests)")]
    QueueFull(usize),
    #[error("model: {0}")]
    Model(#[from] entrobatch_model_runner::ModelError),
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] entrobatch_model_runner::tokenizer::TokenizerError),
    #[error("configuration: {0}")]
    Config(String),
    #[error("the engine has shut down")]
    ShutDown,
}

pub type Result<T> = std::result::Result<T, EngineError>;
