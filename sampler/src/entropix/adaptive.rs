//! The adaptive branch: draw N candidates with the adapted parameters and keep the best.
//!
//! The reference scores candidate i as `log p(x_i) + C`, where the "confidence" C is a
//! weighted sum of the step's metrics. C is the same for every candidate, so the choice is
//! just "the most likely of N draws", which drifts toward greedy as N grows. Here the logit
//! part of C is taken per candidate: the distribution-level entropy H and varentropy VH are
//! replaced by the candidate's own surprisal `s_i = -log2 p(x_i)` and squared deviation
//! `(s_i - H)^2`, whose expectations under the model are exactly H and VH:
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
//! model is nearly sure (H small) the most likely candidate wins as before; when it is
//! unsure, a candidate of typical surprisal can beat a slightly more likely outlier.
//! `p` is the raw model distribution (temperature 1, before penalties); ties keep the
//! earliest draw.

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

/// The documented score of a candidate with raw log-probability `logprob` (nats).
pub fn candidate_score(cfg: &EntropixConfig, logprob: f32, logit: &LogitStats, attn: &AttentionStats) -> f32 {
    let logprob = f64::from(logprob);
    let surprisal = -logprob / std::f64::consts::LN_2;
    let deviation = surprisal - f64::from(logit.entropy);
    let w = |x: f32| f64::from(x);
    let per_sample =
        w(cfg.ada_score_logits_ent) * (1.0 - surprisal) + w(cfg.ada_score_logits_vent) * (1.0 - deviation * deviation);
    let shared = w(cfg.ada_score_attn_ent) * (1.0 - w(attn.entropy))
        + w(cfg.ada_score_attn_vent) * (1.0 - w(attn.varentropy))
        + w(cfg.ada_score_agree) * w(attn.agreement)
        + w(cfg.ada_score_int) * w(attn.interaction_strength);
    (logprob + per_sample + shared) as f32
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
