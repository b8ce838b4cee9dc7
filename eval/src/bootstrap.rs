//! Percentile bootstrap interval for an accuracy: resample the items with replacement and
//! read the 2.5th and 97.5th percentiles of the resampled accuracies. With tens of items
//! the interval is wide, and the report should say so rather than rank strategies on noise.

use serde::Serialize;

/// Resamples per interval: enough for stable 2.5% tails at this sample size.
pub const RESAMPLES: usize = 2000;

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
}

/// The 95% percentile bootstrap interval of the mean of `outcomes` (seeded, so a report
/// is reproducible); [0, 0] for no items.
pub fn accuracy_interval(outcomes: &[bool], seed: u64) -> Interval {
    let scores: Vec<f64> = outcomes.iter().map(|&c| f64::from(u8::from(c))).collect();
    mean_interval(&scores, seed)
}

/// The same interval for per-item scores in [0, 1] (the share of an item's samples that
/// are correct) or per-item differences in [-1, 1] (a paired comparison).
pub fn mean_interval(scores: &[f64], seed: u64) -> Interval {
    let n = scores.len();
    if n == 0 {
        return Interval { low: 0.0, high: 0.0 };
    }
    let mut means: Vec<f64> = (0..RESAMPLES as u64)
        .map(|r| {
            let sum: f64 = (0..n as u64)
                .map(|i| {
                    let u = entrobatch::sampler::uniform(seed, r, i);
                    scores[((u * n as f64) as usize).min(n - 1)]
                })
                .sum();
            sum / n as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    Interval { low: percentile(&means, 0.025), high: percentile(&means, 0.975) }
}

/// Linear interpolation between the closest ranks of a sorted slice.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    let frac = pos - lo as f64;
    sorted[lo] * (1.0 - frac) + sorted[hi] * frac
}

pub fn mean(scores: &[f64]) -> f64 {
    if scores.is_empty() {
        0.0
    } else {
        scores.iter().sum::<f64>() / scores.len() as f64
    }
}
