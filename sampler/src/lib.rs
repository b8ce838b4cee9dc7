//! Token sampling for entrobatch.
//!
//! Sees logits only as `&[f32]` rows: no model or tensor library here. Per row
//! the pipeline is (vLLM-compatible):
//!
//! 1. reject non-finite raw logits (that row alone fails);
//! 2. logprobs from log-softmax of the raw logits;
//! 3. on a copy: logit_bias -> repetition penalty -> presence/frequency ->
//!    no-repeat-n-gram ban;
//! 4. a structured-output row: tokens its grammar forbids -> -inf;
//! 5. temperature 0: argmax; otherwise temperature -> min_p -> top_k -> top_p
//!    -> inverse-CDF draw with `uniform(seed, step, 0)`.

mod branch_score;
pub mod entropix;
mod entropy;
mod error;
mod filter;
mod lanes;
mod logprobs;
pub mod mti;
mod nucleus;
mod params;
mod penalties;
mod rng;
mod sampler;
pub mod token_mask;
pub mod wedlm;

pub use branch_score::{BranchScorer, TokenScore};
pub use entropy::{entropy_nats, entropy_varentropy_nats};
pub use error::SamplerError;
pub use filter::{argmax, sample_filtered, FilterConfig};
pub use logprobs::{log_softmax, logsumexp, top_logprobs};
pub use params::{SamplingParams, MAX_LOGPROBS};
pub use penalties::{apply_logit_bias, apply_penalties, needs_penalties};
pub use rng::{hash_counter, uniform};
pub use sampler::{first_non_finite, sample_row, SampleInput, SampleOutput};
pub use token_mask::TokenMask;
