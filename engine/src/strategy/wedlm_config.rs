//! WeDLM's per-request settings, and which of the request's sampling parameters a window's
//! parallel fill can honour.
//!
//! Each mask row is sampled on its own from one forward, so per-row parameters apply exactly
//! (temperature, top-k, top-p, min-p, logit bias). The history penalties (repetition,
//! presence, frequency, no-repeat-n-gram) are defined on the tokens *before* the one being
//! chosen; masks filled in the same forward do not see each other, and a slot may be filled
//! before the slots to its left, so no such history exists: they are refused, not ignored.

use entrobatch_sampler::SamplingParams;
use serde::{Deserialize, Serialize};

use super::StrategyError;

/// The reference's default sampling temperature (Tencent/WeDLM `wedlm/sampling_params.py`:
/// `temperature=0.2`). The HTTP server uses it for a WeDLM request that sets no temperature
/// (neither the client nor the server's generation defaults); a temperature that was set is
/// used as given, and the CLI's `--temperature` (default 0, greedy) is always set.
pub const WEDLM_DEFAULT_TEMPERATURE: f32 = 0.2;

/// The first sampling parameter WeDLM cannot honour, if the request sets one, with why.
pub fn unsupported_sampling(sampling: &SamplingParams) -> Option<(&'static str, String)> {
    let why = |what: &str| {
        format!(
            "{what} under WeDLM: a window fills several positions from one forward, none of which sees \
             the others' tokens, so a penalty on the tokens before a position has no history to use; \
             leave it unset or use plain, entropix or mti decoding"
        )
    };
    if sampling.repetition_penalty != 1.0 {
        return Some(("repetition_penalty", why("repetition_penalty is not supported")));
    }
    if sampling.presence_penalty != 0.0 {
        return Some(("presence_penalty", why("presence_penalty is not supported")));
    }
    if sampling.frequency_penalty != 0.0 {
        return Some(("frequency_penalty", why("frequency_penalty is not supported")));
    }
    if sampling.no_repeat_ngram_size != 0 {
        return Some(("no_repeat_ngram_size", why("no_repeat_ngram_size is not supported")));
    }
    None
}

/// Per-request WeDLM settings (defaults: the reference engine's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WedlmConfig {
    /// W: window slots after the committed tokens.
    pub window_size: usize,
    /// tau in nats: fill every mask with `H + lambda * distance < tau`; `None` fills exactly
    /// one (the lowest penalised entropy) per forward.
    pub entropy_threshold: Option<f32>,
    /// lambda: penalty per window slot of distance from the leftmost mask.
    pub pos_penalty: f32,
}

impl Default for WedlmConfig {
    fn default() -> Self {
        Self { window_size: 16, entropy_threshold: Some(0.4), pos_penalty: 0.02 }
    }
}

impl WedlmConfig {
    pub fn validate(&self) -> Result<(), StrategyError> {
        if self.window_size == 0 {
            return Err(StrategyError::config("wedlm", "window_size must be at least 1"));
        }
        if let Some(t) = self.entropy_threshold {
            // +inf is allowed: every mask is filled every forward.
            if t.is_nan() || t < 0.0 {
                return Err(StrategyError::config(
                    "wedlm",
                    format!("entropy_threshold must be >= 0 (or none), got {t}"),
                ));
            }
        }
        if !(self.pos_penalty.is_finite() && self.pos_penalty >= 0.0) {
            return Err(StrategyError::config(
                "wedlm",
                format!("pos_penalty must be finite and >= 0, got {}", self.pos_penalty),
            ));
        }
        Ok(())
    }
}
