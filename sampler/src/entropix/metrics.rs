//! The quantities entropix branches on, per sequence (never averaged over the batch as the
//! reference does): logit entropy and varentropy of the raw row, and four statistics of the
//! last layer's attention scores of the current query.

use serde::{Deserialize, Serialize};

use crate::entropy::Partition;

const LN_2: f64 = std::f64::consts::LN_2;

/// Entropy `H = E[-log2 p]` (bits) and varentropy `Var[-log2 p]` (bits^2) of `softmax(logits)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogitStats {
    pub entropy: f32,
    pub varentropy: f32,
}

/// From the raw logits: temperature 1, before any penalty or filter.
pub fn logit_stats(logits: &[f32]) -> LogitStats {
    row_moments(logits).stats
}

/// The stats plus the row's log-partition: the sampler needs both every step, and the
/// logprobs reuse the partition's pass rather than taking their own.
pub(crate) struct RowMoments {
    pub stats: LogitStats,
    max: f32,
    log_z: f64,
}

impl RowMoments {
    /// `ln p` of a raw logit.
    pub fn logprob(&self, logit: f32) -> f32 {
        (f64::from(logit - self.max) - self.log_z) as f32
    }
}

/// `H` and `Var[-ln p]` from `entropy.rs`'s partition, in bits; the log-partition kept for
/// the logprobs.
pub(crate) fn row_moments(logits: &[f32]) -> RowMoments {
    let Some(p) = Partition::of(logits) else {
        // Empty or fully masked: no uncertainty to measure.
        return RowMoments { stats: LogitStats::default(), max: f32::NEG_INFINITY, log_z: 0.0 };
    };
    let stats =
        LogitStats { entropy: (p.entropy() / LN_2) as f32, varentropy: (p.varentropy(logits) / (LN_2 * LN_2)) as f32 };
    RowMoments { stats, max: p.max, log_z: p.log_z() }
}

/// Attention statistics of one query row over the positions that exist, in bits.
/// The model runner computes the same four numbers inside its attention kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AttentionStats {
    /// Mean over heads of each head's attention entropy.
    pub entropy: f32,
    /// Population variance across heads of the per-head entropy.
    pub varentropy: f32,
    /// Mean over heads and keys of `|P[h,k] - mean_h P[h,k]|` (grows with disagreement).
    pub agreement: f32,
    /// Mean absolute pre-softmax score.
    pub interaction_strength: f32,
}

/// The v1 formulas (sampler.py `calculate_metrics` after the #17 varentropy fix) at f64:
/// `scores` = `[heads, keys]` pre-softmax `q.k / sqrt(d)` of one query row, masked to the
/// keys that exist. This is the dense reference the runner's kernels are tested against.
pub fn attention_stats(scores: &[f32], heads: usize, keys: usize) -> AttentionStats {
    if heads == 0 || keys == 0 || scores.len() < heads * keys {
        return AttentionStats::default();
    }
    let mut probs = vec![0f64; heads * keys];
    let mut head_entropy = Vec::with_capacity(heads);
    for h in 0..heads {
        let row = &scores[h * keys..(h + 1) * keys];
        let p = &mut probs[h * keys..(h + 1) * keys];
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &s| m.max(f64::from(s)));
        let mut sum = 0.0;
        for (pi, &s) in p.iter_mut().zip(row) {
            *pi = (f64::from(s) - max).exp();
            sum += *pi;
        }
        let mut entropy = 0.0;
        for pi in p.iter_mut() {
            *pi /= sum;
            // The reference clips before the log so that p = 0 contributes 0, not NaN.
            entropy -= *pi * pi.clamp(1e-10, 1.0).log2();
        }
        head_entropy.push(entropy);
    }
    let n = heads as f64;
    let mean = head_entropy.iter().sum::<f64>() / n;
    let var = head_entropy.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / n;
    let mut deviation = 0.0;
    for k in 0..keys {
        let head_mean = (0..heads).map(|h| probs[h * keys + k]).sum::<f64>() / n;
        deviation += (0..heads).map(|h| (probs[h * keys + k] - head_mean).abs()).sum::<f64>();
    }
    let total = (heads * keys) as f64;
    let strength = scores[..heads * keys].iter().map(|&s| f64::from(s).abs()).sum::<f64>();
    AttentionStats {
        entropy: mean as f32,
        varentropy: var as f32,
        agreement: (deviation / total) as f32,
        interaction_strength: (strength / total) as f32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entropy::entropy_varentropy_nats;

    #[test]
    fn one_pass_moments_match_the_sampler_entropy() {
        let logits: Vec<f32> = (0..1000).map(|i| ((i * 7919 % 1000) as f32 * 0.013).sin() * 6.0).collect();
        let (h, v) = entropy_varentropy_nats(&logits);
        let m = row_moments(&logits);
        assert!((f64::from(m.stats.entropy) * LN_2 - f64::from(h)).abs() < 1e-5);
        assert!((f64::from(m.stats.varentropy) * LN_2 * LN_2 - f64::from(v)).abs() < 1e-4);
        let lp = crate::log_softmax(&logits);
        assert!((m.logprob(logits[3]) - lp[3]).abs() < 1e-5);
    }

    #[test]
    fn uniform_logits_have_log2_n_bits() {
        let s = logit_stats(&[0.5; 8]);
        assert!((s.entropy - 3.0).abs() < 1e-6);
        assert!(s.varentropy.abs() < 1e-9);
    }

    #[test]
    fn identical_uniform_heads_agree_completely() {
        // Two heads, four keys, flat scores of 2: entropy 2 bits each, no spread.
        let a = attention_stats(&[2.0; 8], 2, 4);
        assert!((a.entropy - 2.0).abs() < 1e-6);
        assert_eq!(a.varentropy, 0.0);
        assert_eq!(a.agreement, 0.0);
        assert!((a.interaction_strength - 2.0).abs() < 1e-6);
    }
}
