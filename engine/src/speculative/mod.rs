//! Speculative decoding with no draft model (issue 42): drafters propose tokens that a
//! sequence's next forward verifies as extra query rows of the same batch. The scheduler
//! decides how many of them fit the step (`Scheduler::set_draft`); `verify` keeps the longest
//! prefix the request's own sampler agrees with. A request may bring its own drafts: a predicted
//! output (OpenAI's `prediction`), drafted from before the engine's drafter.

mod config;
mod drafter;
mod ngram;
mod prediction;
mod speculation;
mod suffix;
mod verify;

pub use config::{SpeculativeConfig, SpeculativeMethod};
pub use drafter::{Draft, Drafter};
pub use ngram::PromptLookup;
pub use prediction::Prediction;
pub use speculation::{DraftVerdict, SharedAcceptance, Speculation};
pub use suffix::SuffixIndex;
pub use verify::{verify, Verdict};
