//! One entropix v1 decision for one sequence: metrics -> quadrant -> token.

use super::adaptive::{draw_candidates, AdaptiveRow, Candidate};
use super::branch::{classify, Branch, Quadrant};
use super::config::EntropixConfig;
use super::filters::{adaptive_filter, explore_filter, pause_sample_filter, resample_filter};
use super::metrics::{row_moments, AttentionStats, LogitStats};
use super::shortlist::draw_one;
use crate::error::SamplerError;
use crate::filter::{argmax, FilterConfig};
use crate::rng::uniform;
use crate::sampler::check_row;

/// Everything one step of one sequence needs.
#[derive(Clone, Copy)]
pub struct EntropixInput<'a> {
    /// Raw logits of the row: metrics and candidate scores are computed on these.
    pub logits: &'a [f32],
    /// The row after the request's penalties / logit bias, if it has any; tokens are drawn
    /// from it. `None` draws from `logits`.
    pub penalised: Option<&'a [f32]>,
    /// Last-layer attention statistics of this row; `None` (a model path that did not
    /// provide them) counts as all zeros.
    pub attention: Option<AttentionStats>,
    /// The token before the one being chosen (last output token, else last prompt token).
    pub previous_token: Option<u32>,
    /// The pause / clarification token; without one HELV always draws the hotter sample.
    pub pause_token: Option<u32>,
    pub seed: u64,
    /// Output index of the token being chosen: draw `d` of this step is `uniform(seed, step, d)`.
    pub step: u64,
}

/// The chosen token and why.
#[derive(Clone, Debug, PartialEq)]
pub struct EntropixDecision {
    pub token_id: u32,
    pub branch: Branch,
    pub logit: LogitStats,
    pub attention: AttentionStats,
    /// The draw parameters used (`None` for argmax and the pause token).
    pub filter: Option<FilterConfig>,
    /// The adaptive branch's candidates; empty for the other branches.
    pub candidates: Vec<Candidate>,
    /// `ln p` of the chosen token under the raw distribution.
    pub logprob: f32,
}

/// Chooses one token with the v1 quadrants (first match wins, see `classify`).
pub fn entropix_sample(input: &EntropixInput<'_>, cfg: &EntropixConfig) -> Result<EntropixDecision, SamplerError> {
    let logits = input.logits;
    check_row(logits)?;
    let draw_logits = input.penalised.unwrap_or(logits);
    if !draw_logits.iter().any(|&l| l > f32::NEG_INFINITY) {
        return Err(SamplerError::AllTokensMasked);
    }
    let moments = row_moments(logits);
    let logit = moments.stats;
    let attn = input.attention.unwrap_or_default();
    let raw_logprob = |t: u32| logits.get(t as usize).map_or(f32::NEG_INFINITY, |&l| moments.logprob(l));
    let single = |filter: FilterConfig| draw_one(draw_logits, &filter, uniform(input.seed, input.step, 0), None);

    let pause = input.pause_token.filter(|&p| (p as usize) < logits.len() && input.previous_token != Some(p));
    let (token_id, branch, filter, candidates) = match classify(&logit, cfg) {
        Quadrant::Lelv => (argmax(draw_logits), Branch::Argmax, None, Vec::new()),
        Quadrant::Helv => match pause {
            Some(p) => (p, Branch::Pause, None, Vec::new()),
            None => {
                // Hotter, and never the pause token again: it is left out of this draw.
                let f = pause_sample_filter(cfg, &attn);
                let u = uniform(input.seed, input.step, 0);
                (draw_one(draw_logits, &f, u, input.pause_token), Branch::PauseSample, Some(f), Vec::new())
            }
        },
        Quadrant::Lehv => {
            let f = explore_filter(cfg, &attn);
            (single(f), Branch::Explore, Some(f), Vec::new())
        }
        Quadrant::Hehv => {
            let f = resample_filter(cfg, &attn);
            (single(f), Branch::Resample, Some(f), Vec::new())
        }
        Quadrant::Adaptive => {
            let f = adaptive_filter(cfg, &logit, &attn);
            let row = AdaptiveRow { draw_logits, raw_logprob: &raw_logprob, seed: input.seed, step: input.step };
            let (candidates, best) = draw_candidates(cfg, &f, &row, &logit, &attn);
            (candidates[best].token_id, Branch::Adaptive, Some(f), candidates)
        }
    };
    Ok(EntropixDecision {
        token_id,
        branch,
        logit,
        attention: attn,
        filter,
        candidates,
        logprob: raw_logprob(token_id),
    })
}
