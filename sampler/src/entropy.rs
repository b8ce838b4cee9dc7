//! Entropy and varentropy of the full softmax distribution, for entropy-aware
//! strategies (entropix, MTI, branching) that act on how uncertain the model is.
//!
//! With `s_i = l_i - max`, `Z = sum e^{s_i}` and `p_i = e^{s_i} / Z`:
//! `-ln p_i = ln Z - s_i`, so `H = ln Z - E[s]` and `Var[-ln p] = Var[s]`.
//! Working with `s` avoids ever forming `ln p_i` for tiny `p_i`.

use crate::lanes::{max_of, partition_sums, shifted_exp, sum_f64};

/// Shannon entropy in nats of `softmax(logits)`.
pub fn entropy_nats(logits: &[f32]) -> f32 {
    Partition::of(logits).map_or(0.0, |p| p.entropy() as f32)
}

/// `(H, Var[-ln p])` in nats of `softmax(logits)`. Masked (-inf) tokens carry
/// zero probability and contribute nothing; an empty row gives `(0, 0)`.
pub fn entropy_varentropy_nats(logits: &[f32]) -> (f32, f32) {
    Partition::of(logits).map_or((0.0, 0.0), |p| (p.entropy() as f32, p.varentropy(logits) as f32))
}

/// The softmax of a row as its first exp pass leaves it.
pub(crate) struct Partition {
    pub(crate) max: f32,
    z: f64,
    /// E[s] under p.
    mean_shifted: f64,
}

impl Partition {
    /// `None` for an empty or fully masked row: no distribution to measure.
    pub(crate) fn of(logits: &[f32]) -> Option<Self> {
        let max = max_of(logits);
        if max == f32::NEG_INFINITY {
            return None;
        }
        let (z, first) = partition_sums(logits, max);
        Some(Self { max, z, mean_shifted: first / z })
    }

    pub(crate) fn log_z(&self) -> f64 {
        self.z.ln()
    }

    pub(crate) fn entropy(&self) -> f64 {
        self.log_z() - self.mean_shifted
    }

    /// `Var[s]` in a second pass around the mean: E[s^2] - E[s]^2 would cancel catastrophically
    /// for peaked distributions.
    pub(crate) fn varentropy(&self, logits: &[f32]) -> f64 {
        let (max, mean) = (self.max, self.mean_shifted);
        let second = sum_f64(logits, move |l| {
            let e = shifted_exp(l, max);
            let d = if e > 0.0 { f64::from(l - max) - mean } else { 0.0 };
            f64::from(e) * d * d
        });
        second / self.z
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_distribution_has_ln_n_entropy_and_no_varentropy() {
        let (h, v) = entropy_varentropy_nats(&[2.0; 4]);
        assert!((h - 4f32.ln()).abs() < 1e-6);
        assert!(v.abs() < 1e-9);
        assert!((entropy_nats(&[7.0; 8]) - 8f32.ln()).abs() < 1e-6);
    }

    #[test]
    fn two_point_distribution_matches_hand_values() {
        // p = (3/4, 1/4): H = 0.5623351, Var = p(1-p) ln(3)^2 = 0.2263029.
        let (h, v) = entropy_varentropy_nats(&[3f32.ln(), 0.0]);
        assert!((h - 0.562_335_1).abs() < 1e-6, "H = {h}");
        assert!((v - 0.226_302_9).abs() < 1e-6, "V = {v}");
    }

    #[test]
    fn masked_tokens_are_ignored() {
        let (h, v) = entropy_varentropy_nats(&[1.0, f32::NEG_INFINITY, 1.0]);
        assert!((h - std::f32::consts::LN_2).abs() < 1e-6);
        assert!(v.abs() < 1e-9);
        assert_eq!(entropy_varentropy_nats(&[]), (0.0, 0.0));
    }
}
