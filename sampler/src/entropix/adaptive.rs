//! The adaptive branch: draw N candidates with the adapted parameters and keep the best.
//!
//! Two scoring rules, chosen by `EntropixConfig::adaptive_score`. The reference's
//! "confidence" is a weighted sum of the step's metrics:
//!
//! ```text
//! C = w_ent (1 - H) + w_aent (1 - attn_ent) + w_vent (1 - VH) + w_avent (1 - attn_vent)
//!   + w_agr agreement + w_int interaction_strength
//! ```
//!
//! `reference` (the default) is the reference's own rule (xjdr-alt/entropix `sampler.py` @
//! cceeb84, `adaptive_sample`): `score_i = ln p(x_i) + C`. C is the same for every candidate,
//! so the winner is simply the most likely of the N draws (it drifts toward greedy as N grows).
//!
//! `surprisal` takes the logit part of C per candidate: H and VH are replaced by the
//! candidate's own surprisal `s_i = -log2 p(x_i)` and squared deviation `(s_i - H)^2`, whose
//! expectations under the model are exactly H and VH:
//!
//! ```text
//! score_i = ln p(x_i)
//!         + w_ent  * (1 - s_i)            + w_vent * (1 - (s_i - H)^2)
//!         + w_aent * (1 - attn_entropy)   + w_avent * (1 - attn_varentropy)
//!         + w_agr  * agreement            + w_int  * interaction_strength
//! ```
//!
//! So `E_x[score]` keeps the reference's confidence value, while the `(s_i - H)^2` term
//! penalises atypical candidates on both sides. The maximum over s lies at
//! `s* = H - (ln 2 + w_ent) / (2 w_vent)` (about H - 1.32 bits with the defaults): when the
//! model is nearly sure (H small) the most likely candidate wins as before; when it is unsure,
//! a candidate of typical surprisal can beat a slightly more likely outlier.
//!
//! In both, `p` is the raw model distribution (temperature 1, before penalties) and ties keep
//! the earliest draw (the reference's `argmax` over the scores).

use serde::{Deserialize, Serialize};

use super::config::EntropixConfig;
use super::metrics::{AttentionStats, LogitStats};
use super::shortlist::Shortlist;
use crate::filter::{sample_filtered, FilterConfig};
use crate::rng::uniform;

/// One drawn candidate and its score.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub token_id: u32,
    /// `ln p(x)` under the raw distribution.
    pub logprob: f32,
    pub score: f32,
}

/// How the adaptive branch scores its candidates (see the module comment).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdaptiveScore {
    /// The reference's sample-independent confidence: the most likely draw wins.
    #[default]
    Reference,
    /// A per-candidate surprisal term: a draw of typical surprisal can win.
    Surprisal,
}

/// The score of a candidate with raw log-probability `logprob` (nats) under `cfg`'s rule.
pub fn candidate_score(cfg: &EntropixConfig, logprob: f32, logit: &LogitStats, attn: &AttentionStats) -> f32 {
    let logprob = f64::from(logprob);
    let w = |x: f32| f64::from(x);
    let logit_part = match cfg.adaptive_score {
        AdaptiveScore::Reference => {
            w(cfg.ada_score_logits_ent) * (1.0 - w(logit.entropy))
                + w(cfg.ada_score_logits_vent) * (1.0 - w(logit.varentropy))
        }
        AdaptiveScore::Surprisal => {
            let surprisal = -logprob / std::f64::consts::LN_2;
            let deviation = surprisal - w(logit.entropy);
            w(cfg.ada_score_logits_ent) * (1.0 - surprisal)
                + w(cfg.ada_score_logits_vent) * (1.0 - deviation * deviation)
        }
    };
    let shared = w(cfg.ada_score_attn_ent) * (1.0 - w(attn.entropy))
        + w(cfg.ada_score_attn_vent) * (1.0 - w(attn.varentropy))
        + w(cfg.ada_score_agree) * w(attn.agreement)
        + w(cfg.ada_score_int) * w(attn.interaction_strength);
    (logprob + logit_part + shared) as f32
}

/// What the adaptive branch needs about the row.
pub struct AdaptiveRow<'a> {
    /// Logits the candidates are drawn from (the raw row, or a penalised copy).
    pub draw_logits: &'a [f32],
    /// `ln p` of every token under the raw distribution.
    pub raw_logprob: &'a dyn Fn(u32) -> f32,
    pub seed: u64,
    pub step: u64,
}

/// Draws `cfg.n_adaptive_samples` candidates (draw numbers 0..N of this step) and returns
/// all of them with the index of the winner.
pub fn draw_candidates(
    cfg: &EntropixConfig,
    filter: &FilterConfig,
    row: &AdaptiveRow<'_>,
    logit: &LogitStats,
    attn: &AttentionStats,
) -> (Vec<Candidate>, usize) {
    let n = cfg.n_adaptive_samples.max(1);
    let mut candidates: Vec<Candidate> = Vec::with_capacity(n);
    let mut best = 0;
    // The top-k is found once for all N draws.
    let shortlist = Shortlist::top_k(row.draw_logits, filter.top_k, None);
    for draw in 0..n {
        let u = uniform(row.seed, row.step, draw as u64);
        let token_id = match &shortlist {
            Some(s) => s.draw(filter, u),
            None => sample_filtered(row.draw_logits, filter, u),
        };
        let logprob = (row.raw_logprob)(token_id);
        let score = candidate_score(cfg, logprob, logit, attn);
        // Strict `>`: NaN never wins and ties keep the earliest draw.
        if draw == 0 || score > candidates[best].score {
            best = draw;
        }
        candidates.push(Candidate { token_id, logprob, score });
    }
    (candidates, best)
}
