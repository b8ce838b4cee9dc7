//! Entropix v1 ("the entropix sampler", xjdr-alt/entropix @ cceeb84), per sequence.
//!
//! Each step classifies the raw logits' entropy H and varentropy VH (bits) into a quadrant:
//! - low H, low VH: argmax ("flowing with unspoken intent");
//! - high H, low VH: the pause / clarification token unless it was the previous token,
//!   else a hotter sample ("treading carefully");
//! - low H, high VH: temperature and top-k from attention interaction strength and agreement
//!   ("exploring forks in the path");
//! - high H, high VH: hot resampling from attention varentropy and entropy ("resampling in
//!   the mist");
//! - otherwise: adaptive temperature / top-p / top-k / min-p, best of N scored candidates.
//!
//! Fixed relative to the reference (see `shared/specs/entropix_mti.md` A.3, A.5, A.11): min-p
//! really removes tokens, top-p keeps the head of the descending distribution, every draw
//! comes from the request's counter RNG `uniform(seed, step, draw)` (new numbers every step),
//! metrics are per sequence and never batch-averaged, attention metrics use only the
//! positions that exist (masked mode) unless `attention_pad_to` asks for the reference's
//! padded cache. The adaptive pick is the reference's (most likely of N draws) by default;
//! `adaptive_score = "surprisal"` scores each candidate by its own surprisal instead.

mod adaptive;
mod branch;
mod config;
mod filters;
mod metrics;
mod shortlist;
mod step;

pub use adaptive::{candidate_score, AdaptiveScore, Candidate};
pub use branch::{classify, Branch, Quadrant};
pub use config::{EntropixConfig, MAX_ADAPTIVE_SAMPLES};
pub use filters::{adaptive_filter, explore_filter, pause_sample_filter, resample_filter};
pub use metrics::{attention_stats, logit_stats, AttentionStats, LogitStats};
pub use step::{entropix_sample, EntropixDecision, EntropixInput};
