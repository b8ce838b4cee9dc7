//! Log-probabilities of the raw logits, reported back to the client.
//!
//! All functions shift by the row maximum before exponentiating and accumulate
//! the partition sum in f64, so 150k-token rows with large logits stay exact to
//! f32 precision. They expect a finite maximum; -inf entries are fine.

use crate::lanes::{max_of, shifted_exp, sum_f64};

/// `ln(sum(exp(logits)))`; -inf for an empty row.
pub fn logsumexp(logits: &[f32]) -> f32 {
    let norm = Normalizer::new(logits);
    norm.max + norm.log_sum
}

/// `logits - logsumexp(logits)` for every entry.
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let norm = Normalizer::new(logits);
    logits.iter().map(|&l| norm.logprob(l)).collect()
}

/// The `n` largest log-probabilities of `softmax(logits)`, descending, ties by lowest id.
pub fn top_logprobs(logits: &[f32], n: usize) -> Vec<(u32, f32)> {
    Normalizer::new(logits).top(logits, n)
}

/// The log-partition of a row, kept as `max + log_sum` rather than one number:
/// `(l - max) - log_sum` stays exact for logits in the thousands, where
/// subtracting a single f32 `logsumexp` would lose the low bits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Normalizer {
    max: f32,
    log_sum: f32,
}

impl Normalizer {
    pub(crate) fn new(logits: &[f32]) -> Self {
        Self::with_max(logits, max_of(logits))
    }

    /// For callers that already found the maximum, saving a pass over the row.
    pub(crate) fn with_max(logits: &[f32], max: f32) -> Self {
        if max == f32::NEG_INFINITY {
            return Normalizer { max, log_sum: 0.0 };
        }
        let sum = sum_f64(logits, move |l| f64::from(shifted_exp(l, max)));
        Normalizer { max, log_sum: sum.ln() as f32 }
    }

    pub(crate) fn logprob(&self, logit: f32) -> f32 {
        (logit - self.max) - self.log_sum
    }

    /// A sorted buffer of at most `n` (<= 20) entries replaces a vocab-sized
    /// sort: after the first few hundred tokens almost every candidate loses
    /// the single comparison against the current n-th best.
    pub(crate) fn top(&self, logits: &[f32], n: usize) -> Vec<(u32, f32)> {
        let mut best: Vec<(u32, f32)> = Vec::with_capacity(n + 1);
        if n == 0 {
            return best;
        }
        for (id, &l) in logits.iter().enumerate() {
            if l.is_nan() {
                continue;
            }
            // Strict `>`: an equal value with a higher id never displaces a lower id.
            if best.len() == n && best.last().is_some_and(|&(_, worst)| l <= worst) {
                continue;
            }
            // Equal values stay in id order because the newcomer goes after them.
            let at = best.partition_point(|&(_, v)| v >= l);
            best.insert(at, (id as u32, l));
            if best.len() > n {
                best.pop();
            }
        }
        for entry in &mut best {
            entry.1 = self.logprob(entry.1);
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_matches_hand_values() {
        // lse([1,2,3]) = 3 + ln(1 + e^-1 + e^-2) = 3.4076059
        let lp = log_softmax(&[1.0, 2.0, 3.0]);
        let want = [-2.407_606, -1.407_606, -0.407_606];
        for (got, want) in lp.iter().zip(want) {
            assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        }
    }

    #[test]
    fn log_softmax_is_stable_for_huge_logits() {
        let lp = log_softmax(&[1000.0, 1000.0]);
        // A single f32 logsumexp (1000.6931) is only good to ~6e-5 here.
        assert!((lp[0] - (-std::f32::consts::LN_2)).abs() < 1e-6, "{}", lp[0]);
        assert!((logsumexp(&[1000.0, 1000.0]) - 1_000.693_1).abs() < 1e-3);
        assert_eq!(lp[0], lp[1]);
    }

    #[test]
    fn top_logprobs_orders_and_breaks_ties_by_id() {
        let logits = [0.5, 3.0, 1.0, 3.0, -2.0, 1.0];
        let lp = log_softmax(&logits);
        let top = top_logprobs(&logits, 4);
        assert_eq!(top, vec![(1, lp[1]), (3, lp[3]), (2, lp[2]), (5, lp[5])]);
        assert_eq!(top_logprobs(&logits, 10).len(), 6);
        assert!(top_logprobs(&logits, 0).is_empty());
    }
}
