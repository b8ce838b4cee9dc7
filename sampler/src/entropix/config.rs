//! Every threshold and coefficient of the entropix v1 sampler, per request.
//!
//! Field names and defaults follow the reference `SamplerConfig` (xjdr-alt/entropix
//! `sampler.py` @ cceeb84); the constants that the reference hard-codes inside its branches
//! (temperature caps, the top-k floor, the adaptive clamps) are fields here too. Entropies
//! are in bits, varentropies in bits^2.

use serde::{Deserialize, Serialize};

use super::adaptive::AdaptiveScore;
use crate::error::SamplerError;

/// The most candidates the adaptive branch may draw (the "Entropixplained" write-up's 12).
pub const MAX_ADAPTIVE_SAMPLES: usize = 12;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EntropixConfig {
    /// Base temperature T0.
    pub temp: f32,
    pub top_p: f32,
    pub top_k: usize,
    pub min_p: f32,

    /// Quadrant thresholds on the logit entropy H (bits) and varentropy VH (bits^2).
    pub low_ent_thresh: f32,
    pub low_vent_thresh: f32,
    pub med_ent_thresh: f32,
    pub high_ent_thresh: f32,
    pub high_vent_thresh: f32,

    /// High entropy, low varentropy, pause already emitted:
    /// `T = min(helv_max_temp, T0 * (offset + coef * attn_entropy))`.
    pub helv_attn_ent_offset: f32,
    pub helv_attn_ent_coef: f32,
    pub helv_max_temp: f32,

    /// Low entropy, high varentropy:
    /// `T = min(lehv_max_temp, T0 * (offset + coef * interaction_strength))`,
    /// `top_k = max(lehv_min_top_k, floor(top_k * (1 + lehv_agreement_coef * (1 - agreement))))`.
    pub lehv_interaction_strength_offset: f32,
    pub lehv_interaction_strength_coef: f32,
    pub lehv_max_temp: f32,
    pub lehv_agreement_coef: f32,
    pub lehv_min_top_k: usize,

    /// High entropy, high varentropy:
    /// `T = max(hehv_min_temp, T0 * (offset + coef * attn_varentropy))`,
    /// `top_p = max(hehv_min_top_p, top_p - hehv_attn_ent_coef * attn_entropy)`.
    pub hehv_attn_vent_offset: f32,
    pub hehv_attn_vent_coef: f32,
    pub hehv_min_temp: f32,
    pub hehv_attn_ent_coef: f32,
    pub hehv_min_top_p: f32,

    /// Adaptive branch: candidates drawn per step (1..=12).
    pub n_adaptive_samples: usize,
    /// `T = T0 * (1 + ada_temp_logits*(H+VH) + ada_temp_attn*(attn_ent+attn_vent) - ada_temp_agree*agreement)`,
    /// clamped to `[ada_min_temp, ada_max_temp]` (the reference has no clamp; a negative
    /// temperature would silently mean greedy).
    pub ada_temp_logits: f32,
    pub ada_temp_attn: f32,
    pub ada_temp_agree: f32,
    pub ada_min_temp: f32,
    pub ada_max_temp: f32,
    /// `top_p = clip(top_p * (1 + ada_top_p * attn_vent), ada_min_top_p, 1)`.
    pub ada_top_p: f32,
    pub ada_min_top_p: f32,
    /// `top_k = clip(round(top_k * (1 + ada_top_k_int*IS - ada_top_k_agree*agreement)), 1, ada_max_top_k)`.
    pub ada_top_k_int: f32,
    pub ada_top_k_agree: f32,
    pub ada_max_top_k: usize,
    /// `min_p = clip(min_p * (1 - ada_min_p*(H+VH)), ada_min_min_p, ada_max_min_p)`.
    pub ada_min_p: f32,
    pub ada_min_min_p: f32,
    pub ada_max_min_p: f32,
    /// How candidates are scored: `"reference"` (default: the most likely draw wins) or
    /// `"surprisal"` (a per-candidate surprisal term; see `adaptive`).
    pub adaptive_score: AdaptiveScore,
    /// Weights of the candidate score (see `adaptive::candidate_score`).
    pub ada_score_logits_ent: f32,
    pub ada_score_attn_ent: f32,
    pub ada_score_logits_vent: f32,
    pub ada_score_attn_vent: f32,
    pub ada_score_agree: f32,
    pub ada_score_int: f32,

    /// Attention metrics as the reference computes them: over a cache of this many slots
    /// (the reference's `max_seq_len`, 4096) whose empty slots score 0, so its thresholds
    /// apply as calibrated. `None` (default): over the keys that exist.
    pub attention_pad_to: Option<usize>,
    /// Explicit pause / clarification token id; `None` lets the engine look one up in the
    /// model's tokenizer (`" ..."`, then `"..."`, `" ?"`, `"?"`).
    pub pause_token_id: Option<u32>,
}

impl Default for EntropixConfig {
    fn default() -> Self {
        Self {
            temp: 0.666,
            top_p: 0.90,
            top_k: 27,
            min_p: 0.03,
            low_ent_thresh: 0.1,
            low_vent_thresh: 0.1,
            med_ent_thresh: 3.0,
            high_ent_thresh: 5.0,
            high_vent_thresh: 5.0,
            helv_attn_ent_offset: 1.3,
            helv_attn_ent_coef: 0.2,
            helv_max_temp: 1.5,
            lehv_interaction_strength_offset: 1.2,
            lehv_interaction_strength_coef: 0.3,
            lehv_max_temp: 1.5,
            lehv_agreement_coef: 0.5,
            lehv_min_top_k: 5,
            hehv_attn_vent_offset: 2.0,
            hehv_attn_vent_coef: 0.5,
            hehv_min_temp: 2.0,
            hehv_attn_ent_coef: 0.2,
            hehv_min_top_p: 0.5,
            n_adaptive_samples: 5,
            ada_temp_logits: 0.3,
            ada_temp_attn: 0.2,
            ada_temp_agree: 0.2,
            ada_min_temp: 0.01,
            ada_max_temp: 10.0,
            ada_top_p: 0.1,
            ada_min_top_p: 0.1,
            ada_top_k_int: 0.3,
            ada_top_k_agree: 0.2,
            ada_max_top_k: 100,
            ada_min_p: 0.5,
            ada_min_min_p: 0.01,
            ada_max_min_p: 0.5,
            adaptive_score: AdaptiveScore::Reference,
            ada_score_logits_ent: 0.1,
            ada_score_attn_ent: 0.2,
            ada_score_logits_vent: 0.3,
            ada_score_attn_vent: 0.4,
            ada_score_agree: 0.5,
            ada_score_int: 0.6,
            attention_pad_to: None,
            pause_token_id: None,
        }
    }
}

impl EntropixConfig {
    /// Rejects values that would make a branch meaningless (NaN anywhere, probabilities
    /// outside [0, 1], no candidates). Coefficients may be any finite number.
    pub fn validate(&self) -> Result<(), SamplerError> {
        let floats = [
            ("temp", self.temp),
            ("low_ent_thresh", self.low_ent_thresh),
            ("low_vent_thresh", self.low_vent_thresh),
            ("med_ent_thresh", self.med_ent_thresh),
            ("high_ent_thresh", self.high_ent_thresh),
            ("high_vent_thresh", self.high_vent_thresh),
            ("helv_attn_ent_offset", self.helv_attn_ent_offset),
            ("helv_attn_ent_coef", self.helv_attn_ent_coef),
            ("helv_max_temp", self.helv_max_temp),
            ("lehv_interaction_strength_offset", self.lehv_interaction_strength_offset),
            ("lehv_interaction_strength_coef", self.lehv_interaction_strength_coef),
            ("lehv_max_temp", self.lehv_max_temp),
            ("lehv_agreement_coef", self.lehv_agreement_coef),
            ("hehv_attn_vent_offset", self.hehv_attn_vent_offset),
            ("hehv_attn_vent_coef", self.hehv_attn_vent_coef),
            ("hehv_min_temp", self.hehv_min_temp),
            ("hehv_attn_ent_coef", self.hehv_attn_ent_coef),
            ("ada_temp_logits", self.ada_temp_logits),
            ("ada_temp_attn", self.ada_temp_attn),
            ("ada_temp_agree", self.ada_temp_agree),
            ("ada_min_temp", self.ada_min_temp),
            ("ada_max_temp", self.ada_max_temp),
            ("ada_top_p", self.ada_top_p),
            ("ada_top_k_int", self.ada_top_k_int),
            ("ada_top_k_agree", self.ada_top_k_agree),
            ("ada_min_p", self.ada_min_p),
            ("ada_score_logits_ent", self.ada_score_logits_ent),
            ("ada_score_attn_ent", self.ada_score_attn_ent),
            ("ada_score_logits_vent", self.ada_score_logits_vent),
            ("ada_score_attn_vent", self.ada_score_attn_vent),
            ("ada_score_agree", self.ada_score_agree),
            ("ada_score_int", self.ada_score_int),
        ];
        for (field, v) in floats {
            if !v.is_finite() {
                return Err(SamplerError::invalid(field, format!("must be finite, got {v}")));
            }
        }
        let probabilities = [
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("hehv_min_top_p", self.hehv_min_top_p),
            ("ada_min_top_p", self.ada_min_top_p),
            ("ada_min_min_p", self.ada_min_min_p),
            ("ada_max_min_p", self.ada_max_min_p),
        ];
        for (field, v) in probabilities {
            if !(0.0..=1.0).contains(&v) {
                return Err(SamplerError::invalid(field, format!("must be in [0, 1], got {v}")));
            }
        }
        if self.top_p == 0.0 {
            return Err(SamplerError::invalid("top_p", "must be > 0 (1 = off)"));
        }
        let positive = [
            ("temp", self.temp),
            ("ada_min_temp", self.ada_min_temp),
            ("helv_max_temp", self.helv_max_temp),
            ("lehv_max_temp", self.lehv_max_temp),
            ("hehv_min_temp", self.hehv_min_temp),
        ];
        for (field, v) in positive {
            if v <= 0.0 {
                return Err(SamplerError::invalid(field, format!("must be > 0, got {v}")));
            }
        }
        if self.ada_max_temp < self.ada_min_temp {
            return Err(SamplerError::invalid("ada_max_temp", "must be >= ada_min_temp"));
        }
        if self.ada_max_min_p < self.ada_min_min_p {
            return Err(SamplerError::invalid("ada_max_min_p", "must be >= ada_min_min_p"));
        }
        if !(1..=MAX_ADAPTIVE_SAMPLES).contains(&self.n_adaptive_samples) {
            return Err(SamplerError::invalid(
                "n_adaptive_samples",
                format!("must be in [1, {MAX_ADAPTIVE_SAMPLES}], got {}", self.n_adaptive_samples),
            ));
        }
        if self.attention_pad_to == Some(0) {
            return Err(SamplerError::invalid(
                "attention_pad_to",
                "must be >= 1 (leave it out for existing keys only)",
            ));
        }
        if self.ada_max_top_k == 0 {
            return Err(SamplerError::invalid("ada_max_top_k", "must be >= 1"));
        }
        Ok(())
    }
}
