use thiserror::Error;

#[derive(Debug, Error)]
pub enum ModelError {
    #[error("model file {path}: {message}")]
    Load { path: String, message: String },
    #[error("unsupported model: {0}")]
    Unsupported(String),
    #[error("missing GGUF metadata key `{0}`")]
    MissingMetadata(String),
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
    #[error("KV cache: {0}")]
    KvCache(String),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, ModelError>;
