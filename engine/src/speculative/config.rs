//! The server-wide speculation settings, spelt as vLLM's `--speculative-config` JSON.

use serde::{Deserialize, Serialize};

use crate::error::EngineError;

/// Where drafts come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpeculativeMethod {
    /// Prompt lookup: the tokens that followed the latest earlier occurrence of the sequence's
    /// last n-gram, in its own prompt and output.
    Ngram,
    /// Prompt lookup, then a suffix index over recent outputs of every request
    /// (SuffixDecoding, arXiv 2411.04975): the longer the match, the longer the draft.
    Suffix,
}

/// `{"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 4, "prompt_lookup_min": 2}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeculativeConfig {
    pub method: SpeculativeMethod,
    /// The most draft tokens one sequence verifies in a step; the scheduler grants fewer when
    /// the step has no room or the draft is unlikely to be accepted.
    #[serde(default = "default_num_speculative_tokens")]
    pub num_speculative_tokens: usize,
    /// The longest n-gram looked up.
    #[serde(default = "default_prompt_lookup_max")]
    pub prompt_lookup_max: usize,
    /// The shortest n-gram looked up: shorter matches are too often coincidences.
    #[serde(default = "default_prompt_lookup_min")]
    pub prompt_lookup_min: usize,
}

fn default_num_speculative_tokens() -> usize {
    8
}
fn default_prompt_lookup_max() -> usize {
    4
}
fn default_prompt_lookup_min() -> usize {
    2
}

impl SpeculativeConfig {
    /// Most tokens a config may draft per step: beyond it acceptance of the tail is negligible
    /// and the rows only cost.
    pub const MAX_SPECULATIVE_TOKENS: usize = 32;

    pub fn ngram() -> Self {
        Self {
            method: SpeculativeMethod::Ngram,
            num_speculative_tokens: default_num_speculative_tokens(),
            prompt_lookup_max: default_prompt_lookup_max(),
            prompt_lookup_min: default_prompt_lookup_min(),
        }
    }

    /// Parses and checks `--speculative-config`'s JSON.
    pub fn from_json(text: &str) -> Result<Self, EngineError> {
        let config: Self =
            serde_json::from_str(text).map_err(|e| EngineError::Config(format!("--speculative-config: {e}")))?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), EngineError> {
        let invalid = |reason: String| Err(EngineError::Config(format!("--speculative-config: {reason}")));
        if self.num_speculative_tokens == 0 || self.num_speculative_tokens > Self::MAX_SPECULATIVE_TOKENS {
            return invalid(format!(
                "num_speculative_tokens must be 1..={}, got {}",
                Self::MAX_SPECULATIVE_TOKENS,
                self.num_speculative_tokens
            ));
        }
        if self.prompt_lookup_min == 0 || self.prompt_lookup_min > self.prompt_lookup_max {
            return invalid(format!(
                "need 1 <= prompt_lookup_min <= prompt_lookup_max, got {} and {}",
                self.prompt_lookup_min, self.prompt_lookup_max
            ));
        }
        Ok(())
    }
}
