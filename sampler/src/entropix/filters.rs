//! The draw parameters of each sampling branch (v1 formulas, coefficients from the config).
//! They feed `sample_filtered`, whose chain is the fixed one: temperature -> min_p (a real
//! cut, relative to the most likely token) -> top_k -> top_p over descending probabilities.

use super::config::EntropixConfig;
use super::metrics::{AttentionStats, LogitStats};
use crate::filter::FilterConfig;

fn base(cfg: &EntropixConfig) -> FilterConfig {
    FilterConfig { temperature: cfg.temp, top_k: cfg.top_k, top_p: cfg.top_p, min_p: cfg.min_p }
}

/// `top_k = 0` means "off" in the config; scaled top-k branches keep it off.
fn scale_top_k(cfg: &EntropixConfig, k: usize) -> usize {
    if cfg.top_k == 0 {
        0
    } else {
        k
    }
}

/// HELV after a pause: `T = min(helv_max_temp, T0 * (1.3 + 0.2 * attn_entropy))`.
pub fn pause_sample_filter(cfg: &EntropixConfig, attn: &AttentionStats) -> FilterConfig {
    let t = cfg.temp * (cfg.helv_attn_ent_offset + cfg.helv_attn_ent_coef * attn.entropy);
    FilterConfig { temperature: positive(t.min(cfg.helv_max_temp)), ..base(cfg) }
}

/// LEHV: hotter with strong interaction, wider top-k when heads agree.
pub fn explore_filter(cfg: &EntropixConfig, attn: &AttentionStats) -> FilterConfig {
    let t = cfg.temp
        * (cfg.lehv_interaction_strength_offset + cfg.lehv_interaction_strength_coef * attn.interaction_strength);
    let scaled = cfg.top_k as f32 * (1.0 + cfg.lehv_agreement_coef * (1.0 - attn.agreement));
    // `int()` in the reference truncates; a negative product saturates to 0 in Rust.
    let k = (scaled.max(0.0) as usize).max(cfg.lehv_min_top_k);
    FilterConfig { temperature: positive(t.min(cfg.lehv_max_temp)), top_k: scale_top_k(cfg, k), ..base(cfg) }
}

/// HEHV: at least `hehv_min_temp`, nucleus shrunk by attention entropy.
pub fn resample_filter(cfg: &EntropixConfig, attn: &AttentionStats) -> FilterConfig {
    let t = cfg.temp * (cfg.hehv_attn_vent_offset + cfg.hehv_attn_vent_coef * attn.varentropy);
    let top_p = (cfg.top_p - cfg.hehv_attn_ent_coef * attn.entropy).max(cfg.hehv_min_top_p);
    FilterConfig {
        temperature: positive(t.max(cfg.hehv_min_temp)),
        top_p: top_p.clamp(f32::MIN_POSITIVE, 1.0),
        ..base(cfg)
    }
}

/// The adaptive branch's parameters, from logit and attention uncertainty.
pub fn adaptive_filter(cfg: &EntropixConfig, logit: &LogitStats, attn: &AttentionStats) -> FilterConfig {
    let logit_u = logit.entropy + logit.varentropy;
    let attn_u = attn.entropy + attn.varentropy;
    let t = cfg.temp
        * (1.0 + cfg.ada_temp_logits * logit_u + cfg.ada_temp_attn * attn_u - cfg.ada_temp_agree * attn.agreement);
    let top_p = (cfg.top_p * (1.0 + cfg.ada_top_p * attn.varentropy)).clamp(cfg.ada_min_top_p, 1.0);
    let k =
        cfg.top_k as f32 * (1.0 + cfg.ada_top_k_int * attn.interaction_strength - cfg.ada_top_k_agree * attn.agreement);
    let k = (k.round().max(1.0) as usize).clamp(1, cfg.ada_max_top_k);
    let min_p = (cfg.min_p * (1.0 - cfg.ada_min_p * logit_u)).clamp(cfg.ada_min_min_p, cfg.ada_max_min_p);
    FilterConfig {
        temperature: positive(t.clamp(cfg.ada_min_temp, cfg.ada_max_temp)),
        top_k: scale_top_k(cfg, k),
        top_p: top_p.max(f32::MIN_POSITIVE),
        min_p,
    }
}

/// A temperature that `sample_filtered` will treat as a draw, never as argmax: NaN (from
/// NaN metrics) and non-positive values become the smallest usable temperature.
fn positive(t: f32) -> f32 {
    if t > 1e-4 {
        t
    } else {
        1e-4
    }
}
