//! WeDLM's mask-position rules (Tencent/WeDLM `wedlm/engine/sampler.py`): every mask row of a
//! window gets a token sampled and an entropy, then the positions to fill are those whose
//! position-penalised entropy is below the threshold, or else the single best one.

use std::cmp::Ordering;

use crate::filter::argmax;

/// Mask positions to fill. `entropy[j]` (nats, raw logits) belongs to the mask at window slot
/// `mask_slots[j]` (ascending). The penalty grows with the distance in window slots from the
/// leftmost remaining mask: `H_j + lambda * (slot_j - slot_0)`. With a threshold, every `j`
/// strictly below it is chosen (ascending); if none is, or without a threshold, exactly one:
/// the first minimum (the leftmost mask is not required).
pub fn select_positions(entropy: &[f32], mask_slots: &[usize], threshold: Option<f32>, pos_penalty: f32) -> Vec<usize> {
    let Some(&base) = mask_slots.first() else {
        return Vec::new();
    };
    let adjusted: Vec<f32> =
        entropy.iter().zip(mask_slots).map(|(&h, &slot)| h + pos_penalty * (slot - base) as f32).collect();
    if let Some(tau) = threshold {
        let chosen: Vec<usize> = (0..adjusted.len()).filter(|&j| adjusted[j] < tau).collect();
        if !chosen.is_empty() {
            return chosen;
        }
    }
    let mut best = 0;
    for (j, &a) in adjusted.iter().enumerate() {
        if a < adjusted[best] {
            best = j;
        }
    }
    vec![best]
}

/// A token for one mask row, in the reference's order: temperature 0 is argmax (top-k/top-p
/// ignored); otherwise top-k on the raw logits (ties with the k-th value kept), then top-p on
/// those *untempered* logits (the token that crosses `top_p` stays), then divide by the
/// temperature, softmax, and draw with `uniform` in [0, 1). The reference has no min-p; here
/// `min_p` (0 = off) drops, after the temperature, the kept tokens whose probability is below
/// `min_p` times the largest, i.e. min-p on the distribution the token is drawn from (vLLM's
/// definition). Each row stands alone, so this holds for every mask of a parallel fill.
pub fn sample_mask_token(logits: &[f32], temperature: f32, top_k: usize, top_p: f32, min_p: f32, uniform: f64) -> u32 {
    if temperature.partial_cmp(&0.0) != Some(Ordering::Greater) {
        return argmax(logits);
    }
    let mut kept: Vec<(u32, f32)> =
        logits.iter().enumerate().filter(|(_, l)| **l > f32::NEG_INFINITY).map(|(i, &l)| (i as u32, l)).collect();
    if kept.is_empty() {
        return argmax(logits);
    }
    if top_k > 0 && top_k < kept.len() {
        let mut values: Vec<f32> = kept.iter().map(|c| c.1).collect();
        values.select_nth_unstable_by(top_k - 1, |a, b| b.total_cmp(a));
        let kth = values[top_k - 1];
        kept.retain(|c| c.1 >= kth);
    }
    if top_p < 1.0 {
        // Descending by logit, lowest id first among equals (a stable sort of the id order).
        kept.sort_by(|a, b| b.1.total_cmp(&a.1));
        let max = kept[0].1;
        let weights: Vec<f64> = kept.iter().map(|c| f64::from(c.1 - max).exp()).collect();
        let total: f64 = weights.iter().sum();
        // Token i is dropped once the mass strictly before it already exceeds top_p.
        let mut before = 0.0;
        let mut keep = 0;
        for w in &weights {
            if before / total > f64::from(top_p) {
                break;
            }
            before += w;
            keep += 1;
        }
        kept.truncate(keep.max(1));
    }
    let max = kept.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
    let weight = |l: f32| f64::from((l - max) / temperature).exp();
    if min_p > 0.0 {
        // The largest weight is exp(0) = 1, so `p_i / p_max` is the weight itself; the
        // maximum always survives.
        kept.retain(|c| weight(c.1) >= f64::from(min_p));
    }
    let weights: Vec<f64> = kept.iter().map(|c| weight(c.1)).collect();
    let total: f64 = weights.iter().sum();
    let target = uniform.clamp(0.0, 1.0) * total;
    let mut acc = 0.0;
    for (c, w) in kept.iter().zip(&weights) {
        acc += w;
        if acc > target {
            return c.0;
        }
    }
    kept.last().map_or(0, |c| c.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_selects_every_position_strictly_below_it() {
        // Hand-computed: adjusted = [0.30, 0.52, 1.26, 0.50, 2.14]; below 0.6 -> j = 0 and 3.
        let h = [0.3, 0.5, 1.2, 0.4, 2.0];
        let slots = [2, 3, 5, 7, 9];
        assert_eq!(select_positions(&h, &slots, Some(0.6), 0.02), vec![0, 1, 3]);
        assert_eq!(select_positions(&h, &slots, Some(0.51), 0.02), vec![0, 3]);
        // Strict: exactly at the threshold is not below it.
        assert_eq!(select_positions(&[0.5, 0.9], &[0, 1], Some(0.5), 0.0), vec![0]);
        assert_eq!(select_positions(&[0.7, 0.5], &[0, 1], Some(0.5), 0.0), vec![1]);
    }

    #[test]
    fn no_candidate_or_no_threshold_falls_back_to_one_argmin() {
        // Penalty in window slots, not mask ordinals: slot 4 costs 4 * 0.1.
        let h = [1.0, 0.8, 0.2];
        assert_eq!(select_positions(&h, &[0, 1, 4], None, 0.1), vec![2]);
        assert_eq!(select_positions(&h, &[0, 1, 9], None, 0.1), vec![1]);
        assert_eq!(select_positions(&h, &[0, 1, 9], Some(0.1), 0.1), vec![1]);
        // Ties go to the first (leftmost) minimum; a huge penalty makes it strictly left-to-right.
        assert_eq!(select_positions(&[0.5, 0.5], &[3, 4], None, 0.0), vec![0]);
        assert_eq!(select_positions(&[9.0, 0.0, 0.0], &[0, 1, 2], None, 100.0), vec![0]);
        assert!(select_positions(&[], &[], Some(1.0), 0.0).is_empty());
    }

    #[test]
    fn greedy_is_argmax_whatever_the_filters() {
        assert_eq!(sample_mask_token(&[0.0, 3.0, 1.0], 0.0, 1, 0.1, 0.0, 0.99), 1);
    }

    #[test]
    fn top_k_keeps_ties_with_the_kth_value() {
        // k = 1 but two tokens share the top logit: both stay, so a high draw reaches the second.
        let l = [2.0, 0.0, 2.0];
        assert_eq!(sample_mask_token(&l, 1.0, 1, 1.0, 0.0, 0.1), 0);
        assert_eq!(sample_mask_token(&l, 1.0, 1, 1.0, 0.0, 0.9), 2);
    }

    #[test]
    fn top_p_keeps_the_token_that_crosses_it_on_untempered_logits() {
        // p = (0.5, 0.3, 0.2) at T = 1 (logits = ln p). top_p 0.6: 0.5 < 0.6 keeps the second,
        // 0.8 > 0.6 drops the third. A high temperature must not change the kept set.
        let l = [0.5f32.ln(), 0.3f32.ln(), 0.2f32.ln()];
        for t in [1.0, 50.0] {
            let seen: Vec<u32> = (0..100).map(|i| sample_mask_token(&l, t, 0, 0.6, 0.0, i as f64 / 100.0)).collect();
            assert!(seen.contains(&0) && seen.contains(&1) && !seen.contains(&2), "T={t}");
        }
        // Renormalised over the kept pair: P(0) = 0.5 / 0.8 at T = 1.
        assert_eq!(sample_mask_token(&l, 1.0, 0, 0.6, 0.0, 0.62), 0);
        assert_eq!(sample_mask_token(&l, 1.0, 0, 0.6, 0.0, 0.63), 1);
    }

    #[test]
    fn min_p_is_relative_to_the_tempered_maximum() {
        // p = (0.5, 0.3, 0.2). At T = 1 the ratios to the max are (1, 0.6, 0.4): min_p 0.5
        // keeps tokens 0 and 1, renormalised to (0.625, 0.375). At T = 0.5 the ratios square
        // to (1, 0.36, 0.16): only token 0 is left.
        let l = [0.5f32.ln(), 0.3f32.ln(), 0.2f32.ln()];
        assert_eq!(sample_mask_token(&l, 1.0, 0, 1.0, 0.5, 0.62), 0);
        assert_eq!(sample_mask_token(&l, 1.0, 0, 1.0, 0.5, 0.63), 1);
        assert_eq!(sample_mask_token(&l, 1.0, 0, 1.0, 0.5, 0.999), 1);
        assert_eq!(sample_mask_token(&l, 1.0, 0, 1.0, 0.0, 0.999), 2, "min_p 0 is off");
        assert_eq!(sample_mask_token(&l, 0.5, 0, 1.0, 0.5, 0.999), 0);
    }
}
