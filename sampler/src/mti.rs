//! MTI (minimal test-time intervention, arXiv 2510.13940): classifier-free guidance applied
//! only to the tokens where the model is uncertain. This module holds the row arithmetic:
//! the trigger rule and the blend of conditional and unconditional logits. Which rows are
//! unconditional, and when they run, is the engine's business.

use crate::logprobs::Normalizer;

/// Whether a row with conditional entropy `entropy_nats` gets guidance: strictly
/// `H > threshold` (a negative threshold fires on every row, `+inf` never), and never when
/// `guidance_scale == 1`, where the blend is the identity and the extra rows would be waste.
pub fn guidance_triggers(entropy_nats: f32, threshold: f32, guidance_scale: f32) -> bool {
    guidance_scale != 1.0 && entropy_nats > threshold
}

/// The threshold MTI's reference actually applies: `tau = extra_args.entropy_threshold or -1`
/// (EnVision-Research/MTI `run_vllm_offline.py`), so in Python an unset tau and tau = 0 both
/// become -1, "every row" (entropy is never negative), even a one-hot row whose entropy is
/// exactly 0, which a strict `0 > 0` would skip. Any other tau is used as given.
pub fn reference_threshold(tau: f32) -> f32 {
    if tau == 0.0 {
        -1.0
    } else {
        tau
    }
}

/// `l = l_u + w * (l_c - l_u)` on the log-softmaxed conditional and unconditional rows
/// (Sanchez et al.'s CFG form, as MTI's reference code applies it). The result is a logits
/// row for the ordinary sampler chain; it is not normalised itself, and need not be.
///
/// Tokens masked (-inf) in either row stay masked: `-inf - (-inf)` would otherwise be NaN.
pub fn cfg_blend(cond: &[f32], uncond: &[f32], guidance_scale: f32) -> Vec<f32> {
    let nc = Normalizer::new(cond);
    let nu = Normalizer::new(uncond);
    cond.iter()
        .zip(uncond)
        .map(|(&c, &u)| {
            let (lc, lu) = (nc.logprob(c), nu.logprob(u));
            if lc == f32::NEG_INFINITY || lu == f32::NEG_INFINITY {
                f32::NEG_INFINITY
            } else {
                lu + guidance_scale * (lc - lu)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_is_strict_and_off_at_unit_scale() {
        assert!(guidance_triggers(0.7, 0.5, 1.5));
        assert!(!guidance_triggers(0.5, 0.5, 1.5), "H == tau must not trigger");
        assert!(guidance_triggers(0.0, -1.0, 1.5), "tau = -1 fires even on a one-hot row");
        assert!(!guidance_triggers(50.0, f32::INFINITY, 1.5));
        assert!(!guidance_triggers(3.0, -1.0, 1.0), "w = 1 is off");
        assert!(!guidance_triggers(f32::NAN, -1.0, 1.5));
    }

    #[test]
    fn tau_zero_means_every_row_as_in_the_reference() {
        // `0 or -1` is -1 in Python; `0.5 or -1` is 0.5, `-1 or -1` is -1.
        assert_eq!(reference_threshold(0.0), -1.0);
        assert_eq!(reference_threshold(-0.0), -1.0);
        assert_eq!(reference_threshold(0.5), 0.5);
        assert_eq!(reference_threshold(-1.0), -1.0);
        assert_eq!(reference_threshold(f32::INFINITY), f32::INFINITY);
        // A one-hot row has entropy exactly 0: guided at tau = 0, as the reference does.
        let h = crate::entropy_nats(&[0.0, f32::NEG_INFINITY, f32::NEG_INFINITY]);
        assert_eq!(h, 0.0);
        assert!(guidance_triggers(h, reference_threshold(0.0), 1.5));
        assert!(!guidance_triggers(h, 0.0, 1.5), "the strict rule alone would skip it");
    }

    #[test]
    fn blend_matches_hand_values() {
        // cond = ln(0.5, 0.25, 0.25), uncond = ln(0.25, 0.25, 0.5), w = 2:
        // l = 2 ln pc - ln pu = (2ln.5 - ln.25, 2ln.25 - ln.25, 2ln.25 - ln.5)
        //   = (0, ln .25, ln .125): softmax = (8, 2, 1) / 11.
        let cond = [0.5f32.ln() + 3.0, 0.25f32.ln() + 3.0, 0.25f32.ln() + 3.0];
        let uncond = [0.25f32.ln() - 7.0, 0.25f32.ln() - 7.0, 0.5f32.ln() - 7.0];
        let l = cfg_blend(&cond, &uncond, 2.0);
        let want = [0.0, 0.25f32.ln(), 0.125f32.ln()];
        for (got, want) in l.iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{l:?}");
        }
    }

    #[test]
    fn unit_scale_is_the_conditional_distribution() {
        let cond = [1.0f32, -2.0, 0.5, 4.0];
        let uncond = [3.0f32, 3.0, -1.0, 0.0];
        let l = cfg_blend(&cond, &uncond, 1.0);
        let lc = crate::log_softmax(&cond);
        for (a, b) in l.iter().zip(&lc) {
            assert!((a - b).abs() < 1e-6);
        }
    }

    #[test]
    fn masked_tokens_stay_masked() {
        let l = cfg_blend(&[0.0, f32::NEG_INFINITY, 1.0], &[0.0, 0.0, f32::NEG_INFINITY], 1.5);
        assert_eq!(l[1], f32::NEG_INFINITY);
        assert_eq!(l[2], f32::NEG_INFINITY);
        assert!(l[0].is_finite());
    }
}
