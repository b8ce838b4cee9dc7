//! entrobatch: a continuous-batching LLM decoding engine with entropy-aware decoding.
//! This facade re-exports the engine API that embedders use.
//!
//! Cargo features (all on by default; the CLI binary needs all three): `server` (the
//! OpenAI-compatible HTTP server and the load-test client, with axum and hyper), `eval` (the
//! accuracy evaluation harness), `plots` (SVG/PNG charts, with plotters). With
//! `default-features = false` the library keeps the engine API re-exported here and `bench`.

pub use entrobatch_engine::*;
pub use entrobatch_model_runner as model_runner;
pub use entrobatch_sampler as sampler;
pub use entrobatch_scheduler as scheduler;

/// Where `scripts/fetch-model` puts the default model.
pub const DEFAULT_MODEL_PATH: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

pub mod bench;
#[cfg(feature = "eval")]
pub mod eval;
#[cfg(feature = "server")]
pub mod loadtest;
#[cfg(feature = "eval")]
pub mod perplexity;
#[cfg(feature = "plots")]
pub mod plot_font;
#[cfg(feature = "server")]
pub mod server;
