//! entrobatch: a continuous-batching LLM decoding engine with entropy-aware decoding.
//!
//! This crate is the embedder's facade: the engine API (`Engine`, `Request`, `Event`, ...)
//! and the crates under it, and nothing else. The OpenAI-compatible server
//! (`entrobatch-server`), the load-test client (`entrobatch-loadtest`), eval and perplexity
//! (`entrobatch-eval`), the benchmark harness (`entrobatch-bench`) and the `entrobatch`
//! command (`entrobatch-cli`) are crates of their own built on this one.

pub use entrobatch_engine::*;
pub use entrobatch_model_runner as model_runner;
pub use entrobatch_sampler as sampler;
pub use entrobatch_scheduler as scheduler;

/// Where `scripts/fetch-model` puts the default model.
pub const DEFAULT_MODEL_PATH: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
