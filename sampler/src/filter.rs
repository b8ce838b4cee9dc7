//! Temperature, min-p, top-k and top-p, then an inverse-CDF draw.
//!
//! Chain order (vLLM v1): temperature -> min_p -> top_k -> top_p -> draw.
//! - min_p first: it is a per-token threshold relative to the maximum, so it
//!   prunes the vocab in the same pass that builds the candidates, and it gives
//!   the same result before or after top_k (both keep a head of the ranking).
//! - top_p last: its mass is measured on what min_p and top_k kept,
//!   renormalised, so it composes as "nucleus of the already-truncated head".
//!
//! Nothing vocab-sized is ever sorted: top_k uses `select_nth_unstable_by` and
//! top_p a log-scale histogram (see `nucleus.rs`).

use std::cmp::Ordering;

use entrobatch_math::exp_nonpositive;

use crate::lanes::{max_of, sum_f64};
use crate::nucleus::{keep_nucleus, nucleus_of, top_k_superset};
use crate::params::SamplingParams;

/// The draw-shaping subset of `SamplingParams`, reusable by other strategies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FilterConfig {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
}

impl From<&SamplingParams> for FilterConfig {
    fn from(p: &SamplingParams) -> Self {
        FilterConfig { temperature: p.temperature, top_k: p.top_k, top_p: p.top_p, min_p: p.min_p }
    }
}

/// Index of the largest logit; ties go to the lowest index. NaN never wins.
/// Returns 0 for an empty or fully masked row.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = (0usize, f32::NEG_INFINITY);
    for (i, &l) in logits.iter().enumerate() {
        if l > best.1 {
            best = (i, l);
        }
    }
    best.0 as u32
}

/// Draws a token from already-penalised `logits` (-inf = banned) using the
/// caller's `uniform` in [0, 1). Temperature <= 0 (or NaN) means argmax.
pub fn sample_filtered(logits: &[f32], cfg: &FilterConfig, uniform: f64) -> u32 {
    if !draws(cfg) {
        return argmax(logits);
    }
    sample_with_max(logits, max_of(logits), cfg, uniform)
}

/// `sample_filtered` for a caller that already holds the row's maximum (the row scan of
/// `sample_row`), saving a pass over the vocabulary.
pub(crate) fn sample_with_max(logits: &[f32], max: f32, cfg: &FilterConfig, uniform: f64) -> u32 {
    if !draws(cfg) || max == f32::NEG_INFINITY {
        return argmax(logits);
    }
    let weights = tempered_weights(logits, max, cfg.temperature, cfg.min_p);
    let limits_k = cfg.top_k > 0 && cfg.top_k < logits.len();
    let cands = if limits_k {
        let mut cands = top_k_superset(&weights, cfg.top_k);
        keep_top_k(&mut cands, cfg.top_k);
        if cfg.top_p < 1.0 {
            keep_nucleus(&mut cands, cfg.top_p);
        }
        cands
    } else if cfg.top_p < 1.0 {
        nucleus_of(&weights, cfg.top_p)
    } else {
        return draw_in_id_order(&weights, uniform);
    };
    draw(&cands, uniform)
}

/// Whether `cfg` draws at all: partial_cmp rather than `<= 0.0` so that a NaN temperature
/// also means argmax.
fn draws(cfg: &FilterConfig) -> bool {
    cfg.temperature.partial_cmp(&0.0) == Some(Ordering::Greater)
}

/// A surviving token and its unnormalised probability `exp((l - max) / T)`,
/// which is 1 for the most likely token, so sums never underflow.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Candidate {
    pub id: u32,
    pub weight: f32,
}

/// Most likely first, then lowest id: a total order, so every selection and
/// sort below has one answer whatever algorithm or thread computes it.
pub(crate) fn by_rank(a: &Candidate, b: &Candidate) -> Ordering {
    b.weight.total_cmp(&a.weight).then(a.id.cmp(&b.id))
}

/// `exp((l - max) / T)` per token, in id order (1 for the most likely); exactly 0 for a token
/// that is banned or below min_p. One pass that vectorizes, without a libm call per token.
fn tempered_weights(logits: &[f32], max: f32, temperature: f32, min_p: f32) -> Vec<f32> {
    // p_i >= min_p * p_max  <=>  (l_i - max) / T >= ln(min_p): no softmax needed.
    let floor = if min_p > 0.0 { min_p.ln() } else { f32::NEG_INFINITY };
    // `move`: a closure holding references to the scalars reloads them per lane (as gathers).
    logits
        .iter()
        .map(move |&l| {
            // The maximum scores exactly 0 even if it is +inf (an overflowed
            // penalty) or T is so small that (l - max) / T would be NaN.
            let score = if l == max { 0.0 } else { (l - max) / temperature };
            let weight = exp_nonpositive(score);
            if score > f32::NEG_INFINITY && score >= floor {
                weight
            } else {
                0.0
            }
        })
        .collect()
}

/// Keeps the k most likely candidates (ties at the k-th weight: lowest ids).
fn keep_top_k(cands: &mut Vec<Candidate>, k: usize) {
    if k > 0 && k < cands.len() {
        cands.select_nth_unstable_by(k - 1, by_rank);
        cands.truncate(k);
    }
}

/// Inverse CDF over every token in id order: the first whose cumulative weight exceeds
/// `u * total`. The sums of blocks of `DRAW_BLOCK` tokens (taken in lanes) find the block, so
/// only one block is walked token by token.
fn draw_in_id_order(weights: &[f32], uniform: f64) -> u32 {
    let block_sums: Vec<f64> = weights.chunks(DRAW_BLOCK).map(|b| sum_f64(b, f64::from)).collect();
    let target = clamp_uniform(uniform) * block_sums.iter().sum::<f64>();
    let mut acc = 0.0f64;
    for (b, (block, &sum)) in weights.chunks(DRAW_BLOCK).zip(&block_sums).enumerate() {
        if acc + sum <= target {
            acc += sum;
            continue;
        }
        // Summed token by token the block may fall a rounding short of its lane sum: the walk
        // then goes on into the next blocks.
        for (i, &w) in block.iter().enumerate() {
            acc += f64::from(w);
            if acc > target {
                return (b * DRAW_BLOCK + i) as u32;
            }
        }
    }
    // u * total can round up to the full sum; then the last token with mass wins.
    weights.iter().rposition(|&w| w > 0.0).map_or(0, |i| i as u32)
}

/// Tokens per block of `draw_in_id_order`'s first pass.
const DRAW_BLOCK: usize = 256;

fn clamp_uniform(uniform: f64) -> f64 {
    if uniform > 0.0 {
        uniform.min(1.0)
    } else {
        0.0
    }
}

/// Inverse CDF: the first candidate whose cumulative weight exceeds `u * total`.
fn draw(cands: &[Candidate], uniform: f64) -> u32 {
    let total: f64 = cands.iter().map(|c| f64::from(c.weight)).sum();
    let target = clamp_uniform(uniform) * total;
    let mut acc = 0.0f64;
    for c in cands {
        acc += f64::from(c.weight);
        if acc > target {
            return c.id;
        }
    }
    // u * total can round up to the full sum; then the last token with mass wins.
    cands.iter().rev().find(|c| c.weight > 0.0).or(cands.last()).map_or(0, |c| c.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(id: u32, weight: f32) -> Candidate {
        Candidate { id, weight }
    }

    #[test]
    fn draw_walks_the_cdf_in_candidate_order() {
        let cands = [cand(7, 1.0), cand(3, 3.0)];
        assert_eq!(draw(&cands, 0.0), 7);
        assert_eq!(draw(&cands, 0.249), 7);
        assert_eq!(draw(&cands, 0.251), 3);
        assert_eq!(draw(&cands, 0.999_999), 3);
        // Out-of-range uniforms are clamped rather than trusted.
        assert_eq!(draw(&cands, 1.5), 3);
        assert_eq!(draw(&cands, f64::NAN), 7);
    }

    /// Walking every token by blocks draws what walking the surviving candidates draws.
    #[test]
    fn drawing_by_blocks_matches_the_candidate_walk() {
        for len in [1, 255, 256, 257, 49_152 + 3] {
            let logits: Vec<f32> = (0..len)
                .map(|i| if i % 13 == 5 { f32::NEG_INFINITY } else { ((i * 7919) % 1009) as f32 * 0.01 })
                .collect();
            let weights = tempered_weights(&logits, max_of(&logits), 0.7, 0.0);
            let cands: Vec<Candidate> = weights
                .iter()
                .enumerate()
                .filter(|&(_, &weight)| weight > 0.0)
                .map(|(i, &weight)| Candidate { id: i as u32, weight })
                .collect();
            for k in 0..=200 {
                let u = k as f64 / 200.0;
                assert_eq!(draw_in_id_order(&weights, u), draw(&cands, u), "{len} tokens, u = {u}");
            }
        }
    }

    #[test]
    fn banned_and_min_p_cut_tokens_weigh_exactly_nothing() {
        let weights = tempered_weights(&[0.0, f32::NEG_INFINITY, -1.0, -10.0, f32::NAN], 0.0, 1.0, 0.1);
        assert_eq!(weights[0], 1.0);
        assert_eq!(weights[1], 0.0);
        assert!((weights[2] - (-1f32).exp()).abs() < 1e-7, "{}", weights[2]);
        assert_eq!(&weights[3..], [0.0, 0.0]);
    }

    #[test]
    fn overflowed_maximum_still_wins() {
        let cfg = FilterConfig { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0 };
        assert_eq!(sample_filtered(&[1.0, f32::INFINITY, 2.0], &cfg, 0.9), 1);
        assert_eq!(sample_filtered(&[f32::NEG_INFINITY; 3], &cfg, 0.5), 0);
    }
}
