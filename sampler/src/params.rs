//! Per-request sampling parameters, as they arrive from the API.

use serde::{Deserialize, Serialize};

use crate::error::SamplerError;

/// Largest `logprobs` a request may ask for (OpenAI's limit).
pub const MAX_LOGPROBS: usize = 20;

/// How one request wants its tokens chosen. Every field has an "off" value, and
/// `#[serde(default)]` lets clients send only what they change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// 0.0 means greedy (argmax). Default 1.0.
    pub temperature: f32,
    /// Keep only the k most likely tokens; 0 turns it off.
    pub top_k: usize,
    /// Nucleus mass in (0, 1]; 1.0 turns it off.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p * max_prob`; 0.0 turns it off.
    pub min_p: f32,
    /// HF/vLLM multiplicative penalty over prompt + output tokens; 1.0 turns it off.
    pub repetition_penalty: f32,
    /// Subtracted once from every token already in the output; in [-2, 2].
    pub presence_penalty: f32,
    /// Subtracted per occurrence in the output; in [-2, 2].
    pub frequency_penalty: f32,
    /// Ban tokens that would repeat an n-gram of prompt + output; 0 turns it off.
    pub no_repeat_ngram_size: usize,
    /// Per-request seed; the engine picks one when absent.
    pub seed: Option<u64>,
    /// Number of top logprobs to return with each token (0..=20).
    pub logprobs: Option<usize>,
    /// `(token_id, bias)` added to the raw logits before anything else.
    pub logit_bias: Vec<(u32, f32)>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            no_repeat_ngram_size: 0,
            seed: None,
            logprobs: None,
            logit_bias: Vec::new(),
        }
    }
}

impl SamplingParams {
    /// Deterministic argmax decoding with every processor off.
    pub fn greedy() -> Self {
        SamplingParams { temperature: 0.0, ..Self::default() }
    }

    /// Whether the token is chosen by argmax rather than drawn.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Checks every field against its allowed range. NaN fails every check
    /// because each one is written as "value is inside the range".
    pub fn validate(&self, vocab_size: usize) -> Result<(), SamplerError> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(SamplerError::invalid(
                "temperature",
                format!("must be finite and >= 0 (0 = greedy), got {}", self.temperature),
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SamplerError::invalid("top_p", format!("must be in (0, 1] (1 = off), got {}", self.top_p)));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(SamplerError::invalid("min_p", format!("must be in [0, 1] (0 = off), got {}", self.min_p)));
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return Err(SamplerError::invalid(
                "repetition_penalty",
                format!("must be finite and > 0 (1 = off), got {}", self.repetition_penalty),
            ));
        }
        check_additive_penalty("presence_penalty", self.presence_penalty)?;
        check_additive_penalty("frequency_penalty", self.frequency_penalty)?;
        if let Some(n) = self.logprobs {
            if n > MAX_LOGPROBS {
                return Err(SamplerError::invalid("logprobs", format!("must be in [0, {MAX_LOGPROBS}], got {n}")));
            }
        }
        for &(token_id, bias) in &self.logit_bias {
            if token_id as usize >= vocab_size {
                return Err(SamplerError::invalid(
                    "logit_bias",
                    format!("token id {token_id} is outside the vocabulary [0, {vocab_size})"),
                ));
            }
            // -inf would let a client ban every token and leave nothing to sample.
            if !bias.is_finite() {
                return Err(SamplerError::invalid(
                    "logit_bias",
                    format!("bias for token {token_id} must be finite, got {bias}"),
                ));
            }
        }
        Ok(())
    }
}

fn check_additive_penalty(field: &'static str, value: f32) -> Result<(), SamplerError> {
    if (-2.0..=2.0).contains(&value) {
        Ok(())
    } else {
        Err(SamplerError::invalid(field, format!("must be in [-2, 2] (0 = off), got {value}")))
    }
}
