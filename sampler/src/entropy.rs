//! Entropy and varentropy of the full softmax distribution, for entropy-aware
//! strategies (entropix, MTI) that branch on how uncertain the model is.
//!
//! With `s_i = l_i - max`, `Z = sum e^{s_i}` and `p_i = e^{s_i} / Z`:
//! `-ln p_i = ln Z - s_i`, so `H = ln Z - E[s]` and `Var[-ln p] = Var[s]`.
//! Working with `s` avoids ever forming `ln p_i` for tiny `p_i`.

/// Shannon entropy in nats of `softmax(logits)`.
pub fn entropy_nats(logits: &[f32]) -> f32 {
    moments(logits).map_or(0.0, |m| m.entropy as f32)
}

/// `(H, Var[-ln p])` in nats of `softmax(logits)`. Masked (-inf) tokens carry
/// zero probability and contribute nothing; an empty row gives `(0, 0)`.
pub fn entropy_varentropy_nats(logits: &[f32]) -> (f32, f32) {
    let Some(m) = moments(logits) else {
        return (0.0, 0.0);
    };
    // Second pass around the mean: E[s^2] - E[s]^2 would cancel catastrophically
    // for peaked distributions.
    let mut var = 0.0f64;
    for &l in logits {
        let e = f64::from((l - m.max).exp());
        if e > 0.0 {
            let d = f64::from(l - m.max) - m.mean_shifted;
            var += e * d * d;
        }
    }
    (m.entropy as f32, (var / m.z) as f32)
}

struct Moments {
    max: f32,
    z: f64,
    /// E[s] under p.
    mean_shifted: f64,
    entropy: f64,
}

fn moments(logits: &[f32]) -> Option<Moments> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return None;
    }
    let (mut z, mut weighted) = (0.0f64, 0.0f64);
    for &l in logits {
        let e = f64::from((l - max).exp());
        // Skipping zero-mass entries keeps `0 * -inf` from turning into NaN.
        if e > 0.0 {
            z += e;
            weighted += e * f64::from(l - max);
        }
    }
    let mean_shifted = weighted / z;
    Some(Moments { max, z, mean_shifted, entropy: z.ln() - mean_shifted })
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
