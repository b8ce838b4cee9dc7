//! The embeddable entrobatch engine: submit requests, stream their tokens, abort them.
//!
//! ```no_run
//! use entrobatch_engine::{Engine, EngineConfig, GenerationParams, Prompt, Request};
//! let engine = Engine::start(EngineConfig::new("models/SmolLM2-135M-Instruct.Q4_1.gguf"))?;
//! let handle = engine.submit(Request::new(Prompt::Text("Once upon".into()), GenerationParams::default()))?;
//! for event in handle { println!("{event:?}"); }
//! # Ok::<(), entrobatch_engine::EngineError>(())
//! ```

mod batch_builder;
mod branching;
mod command;
pub mod config;
pub mod detokenizer;
pub mod engine;
mod engine_loop;
pub mod error;
pub mod event;
#[cfg(feature = "faults")]
pub mod faults;
pub mod handle;
mod in_flight;
mod latency_gate;
mod logits_check;
pub mod metrics;
mod prompt_scoring;
pub mod request;
mod request_state;
pub mod speculative;
pub mod stop_checker;
pub mod strategy;
pub mod structured;
mod validation;

pub use config::EngineConfig;
pub use engine::{Engine, EngineInfo, ShutdownMode};
pub use entrobatch_model_runner::{AttentionKernel, ChatMessage, KvDtype, MatmulMode};
pub use entrobatch_sampler::SamplingParams;
pub use entrobatch_scheduler::{LatencyTargets, WouldMissTtft};
pub use error::{EngineError, Result};
pub use event::{
    BranchReport, Event, FinishReason, GeneratedToken, PredictionTokens, PromptLogprob, RequestId, TokenLogprob,
    TokenMetrics,
};
pub use handle::{GenerationOutput, RequestHandle};
pub use metrics::EngineMetrics;
pub use request::{GenerationParams, Prompt, Request};
pub use speculative::{SpeculativeConfig, SpeculativeMethod};
pub use strategy::{Decoding, StrategyError};
pub use validation::PreparedRequest;
