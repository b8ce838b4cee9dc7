//! Draws restricted to the top-k tokens, found once per step.
//!
//! Every entropix sampling branch has a top-k (27 by default, at most `ada_max_top_k` in the
//! adaptive branch), and at the hot temperatures of HEHV and the adaptive branch min-p keeps
//! most of the vocabulary, so `sample_filtered` on the full row would exponentiate and
//! select over ~50k candidates per draw, times N adaptive draws. min-p, the
//! nucleus and the temperature are all relative to the most likely token, which is in the
//! top-k, so drawing from the top-k logits alone gives the same distribution: only the
//! order in which the inverse CDF walks the candidates differs.

use crate::filter::{sample_filtered, FilterConfig};

/// The `k` largest logits of a row (ties: lowest id), most likely first.
pub(crate) struct Shortlist {
    ids: Vec<u32>,
    logits: Vec<f32>,
}

impl Shortlist {
    /// `None` when top-k is off or would keep the whole row (no saving; use the row).
    /// `banned` is left out (HELV's hotter sample never repeats the pause token).
    pub fn top_k(logits: &[f32], k: usize, banned: Option<u32>) -> Option<Self> {
        if k == 0 || k >= logits.len() {
            return None;
        }
        // A sorted buffer: after the first few hundred tokens almost every one fails the
        // single comparison against the current k-th best, so this is one cheap pass.
        let mut best: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
        for (id, &l) in logits.iter().enumerate() {
            let id = id as u32;
            if l == f32::NEG_INFINITY || l.is_nan() || Some(id) == banned {
                continue;
            }
            if best.len() == k && best.last().is_some_and(|&(worst, _)| l <= worst) {
                continue;
            }
            let at = best.partition_point(|&(v, _)| v >= l);
            best.insert(at, (l, id));
            best.truncate(k);
        }
        if best.is_empty() {
            return None;
        }
        Some(Self { ids: best.iter().map(|b| b.1).collect(), logits: best.iter().map(|b| b.0).collect() })
    }

    pub fn draw(&self, filter: &FilterConfig, uniform: f64) -> u32 {
        let index = sample_filtered(&self.logits, filter, uniform) as usize;
        self.ids.get(index).copied().unwrap_or(self.ids[0])
    }
}

/// One draw from `logits` with `filter`, never `banned` (unless it is the only token left),
/// through a shortlist whenever top-k allows one.
pub(crate) fn draw_one(logits: &[f32], filter: &FilterConfig, uniform: f64, banned: Option<u32>) -> u32 {
    if let Some(short) = Shortlist::top_k(logits, filter.top_k, banned) {
        return short.draw(filter, uniform);
    }
    match banned.map(|b| b as usize).filter(|&b| b < logits.len()) {
        Some(b) if logits.iter().enumerate().any(|(i, &l)| i != b && l > f32::NEG_INFINITY) => {
            let mut masked = logits.to_vec();
            masked[b] = f32::NEG_INFINITY;
            sample_filtered(&masked, filter, uniform)
        }
        _ => sample_filtered(logits, filter, uniform),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_k_largest_most_likely_first_with_ties_by_id() {
        let s = Shortlist::top_k(&[1.0, 5.0, 3.0, 5.0, f32::NEG_INFINITY, 4.0], 3, None).unwrap();
        assert_eq!(s.ids, vec![1, 3, 5]);
        let s = Shortlist::top_k(&[1.0, 5.0, 3.0, 5.0, 4.0], 3, Some(3)).unwrap();
        assert_eq!(s.ids, vec![1, 4, 2]);
        assert!(Shortlist::top_k(&[1.0, 2.0], 2, None).is_none());
        assert!(Shortlist::top_k(&[1.0, 2.0], 0, None).is_none());
    }

    #[test]
    fn shortlist_draws_follow_the_full_row_distribution() {
        let logits: Vec<f32> = (0..200).map(|i| ((i * 37 % 200) as f32) * 0.02).collect();
        let f = FilterConfig { temperature: 1.3, top_k: 20, top_p: 0.8, min_p: 0.05 };
        let (mut full, mut short) = (vec![0f64; 200], vec![0f64; 200]);
        let n = 40_000;
        for i in 0..n {
            let u = (i as f64 + 0.5) / n as f64;
            full[sample_filtered(&logits, &f, u) as usize] += 1.0 / n as f64;
            short[draw_one(&logits, &f, u, None) as usize] += 1.0 / n as f64;
        }
        for (a, b) in full.iter().zip(&short) {
            assert!((a - b).abs() < 1e-3, "{a} vs {b}");
        }
    }
}
