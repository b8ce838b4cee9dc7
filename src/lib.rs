//! entrobatch: a continuous-batching LLM decoding engine with entropy-aware decoding.
//! This facade re-exports the engine API that embedders use.

pub use entrobatch_engine::*;
pub use entrobatch_model_runner as model_runner;
pub use entrobatch_sampler as sampler;
pub use entrobatch_scheduler as scheduler;

/// Where `scripts/fetch-model` puts the default model.
pub const DEFAULT_MODEL_PATH: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

pub mod bench;
pub mod eval;
pub mod loadtest;
pub mod plot_font;
pub mod server;
