//! Seeded randomness for the load test: Poisson arrivals (exponential gaps) and synthetic
//! prompts, reproducible from `--seed`.

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

/// Exponential with the given rate (mean 1/rate), by inversion of a uniform in [0, 1).
fn exponential(rng: &mut SplitMix64, rate: f64) -> f64 {
    let unit = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    -(1.0 - unit).ln() / rate
}

/// Send times (seconds from the start) of `n` requests: a Poisson process at `rate`
/// requests/s, or all at once for an infinite rate.
pub fn poisson_arrivals(n: usize, rate: f64, seed: u64) -> Vec<f64> {
    if !rate.is_finite() {
        return vec![0.0; n];
    }
    let mut rng = SplitMix64::seed_from_u64(seed);
    let mut t = 0.0;
    (0..n)
        .map(|_| {
            t += exponential(&mut rng, rate);
            t
        })
        .collect()
}

/// Common words that BPE tokenizers keep as one token with their leading space.
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not", "he",
    "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were", "their",
    "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would", "who", "so", "no",
    "time", "people", "water", "world", "house", "light", "city",
];

/// A prompt of about `len` tokens, different for each `index`, so the prefix cache does not
/// turn the test into a cache benchmark.
pub fn synthetic_prompt(len: usize, seed: u64, index: usize) -> String {
    let mut rng = SplitMix64::seed_from_u64(seed ^ (index as u64).wrapping_mul(0xA24B_AED4_963E_E407));
    let words: Vec<&str> = (0..len.max(1)).map(|_| WORDS[(rng.next_u64() % WORDS.len() as u64) as usize]).collect();
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_gaps_have_the_right_mean_and_spread() {
        let arrivals = poisson_arrivals(20_000, 4.0, 7);
        let gaps: Vec<f64> = std::iter::once(arrivals[0]).chain(arrivals.windows(2).map(|w| w[1] - w[0])).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        // Exponential(4): mean 0.25, std 0.25 (a uniform or fixed gap would fail the std).
        assert!((mean - 0.25).abs() < 0.01, "mean {mean}");
        assert!((var.sqrt() - 0.25).abs() < 0.015, "std {}", var.sqrt());
        assert!(arrivals.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(poisson_arrivals(3, f64::INFINITY, 1), vec![0.0; 3]);
        assert_eq!(poisson_arrivals(5, 2.0, 3), poisson_arrivals(5, 2.0, 3));
    }

    #[test]
    fn prompts_differ_per_request() {
        let a = synthetic_prompt(32, 0, 0);
        assert_eq!(a.split(' ').count(), 32);
        assert_ne!(a, synthetic_prompt(32, 0, 1));
        assert_eq!(a, synthetic_prompt(32, 0, 0));
    }
}
