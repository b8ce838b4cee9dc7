//! Top-p (nucleus) filtering without sorting the vocabulary.
//!
//! For positive f32 the bit pattern is monotone in the value, so the high bits
//! of a weight are a log-scale bucket index: exponent plus 3 mantissa bits,
//! i.e. buckets about 12% wide. Summing mass per bucket from the top finds the
//! one bucket where the cumulative mass crosses `top_p`; every token above it
//! is in the nucleus, and only that boundary bucket needs sorting. This costs
//! two linear passes however flat the distribution is, where a sort of a
//! 150k-token vocabulary would cost milliseconds per row.

use crate::filter::{by_rank, Candidate};

const BUCKET_SHIFT: u32 = 20;
/// Weights are in [0, 1] (the most likely token has weight exactly 1).
const BUCKETS: usize = (1.0f32.to_bits() >> BUCKET_SHIFT) as usize + 1;

fn bucket(weight: f32) -> usize {
    // The clamp only guards the index; weights above 1 never reach here.
    ((weight.to_bits() >> BUCKET_SHIFT) as usize).min(BUCKETS - 1)
}

/// Keeps the smallest most-likely-first set of candidates whose mass reaches
/// `top_p` of their total; the most likely token is always kept. Survivors are
/// the tokens above the boundary bucket in their previous order, then the
/// boundary bucket's kept prefix in rank order.
pub(crate) fn keep_nucleus(cands: &mut Vec<Candidate>, top_p: f32) {
    // Rounding can leave the full sum a hair under `top_p * total`: keep everything.
    let Some(cut) = Cut::find(cands.iter().map(|c| c.weight), top_p) else {
        return;
    };
    let mut boundary: Vec<Candidate> = cands.iter().filter(|c| bucket(c.weight) == cut.edge).copied().collect();
    let keep = cut.boundary_keep(&mut boundary);
    cands.retain(|c| bucket(c.weight) > cut.edge);
    cands.extend_from_slice(&boundary[..keep]);
}

/// `keep_nucleus` over a candidate for every token with mass, straight from a row's weights
/// in id order: the same survivors in the same order, without building a candidate per token.
pub(crate) fn nucleus_of(weights: &[f32], top_p: f32) -> Vec<Candidate> {
    let cut = Cut::find(weights.iter().copied(), top_p);
    let edge = cut.as_ref().map_or(0, |cut| cut.edge);
    let (mut kept, mut boundary) = (Vec::new(), Vec::new());
    for (i, &weight) in weights.iter().enumerate() {
        if weight > 0.0 {
            let b = bucket(weight);
            if b > edge || cut.is_none() {
                kept.push(Candidate { id: i as u32, weight });
            } else if b == edge {
                boundary.push(Candidate { id: i as u32, weight });
            }
        }
    }
    if let Some(cut) = cut {
        let keep = cut.boundary_keep(&mut boundary);
        kept.extend_from_slice(&boundary[..keep]);
    }
    kept
}

/// Every token that can be among the `k` most likely, in id order: those in the buckets from
/// the top down to the one where the count reaches `k` (ties at the k-th weight share its
/// bucket), so top-k selects among a handful rather than the vocabulary.
pub(crate) fn top_k_superset(weights: &[f32], k: usize) -> Vec<Candidate> {
    let mut counts = vec![0u32; BUCKETS];
    for &w in weights.iter().filter(|&&w| w > 0.0) {
        counts[bucket(w)] += 1;
    }
    let mut seen = 0usize;
    let edge = (0..BUCKETS)
        .rev()
        .find(|&b| {
            seen += counts[b] as usize;
            seen >= k
        })
        .unwrap_or(0);
    weights
        .iter()
        .enumerate()
        .filter(|&(_, &weight)| weight > 0.0 && bucket(weight) >= edge)
        .map(|(i, &weight)| Candidate { id: i as u32, weight })
        .collect()
}

/// Where a nucleus ends: every token in a bucket above `edge` is in, and the edge bucket's
/// most likely tokens until the mass reaches `target`.
struct Cut {
    edge: usize,
    /// Mass of the buckets above the edge.
    above: f64,
    target: f64,
}

impl Cut {
    /// `None` when rounding leaves the full sum a hair under `top_p * total`.
    fn find(weights: impl Iterator<Item = f32>, top_p: f32) -> Option<Self> {
        let mut mass = vec![0.0f64; BUCKETS];
        let mut total = 0.0f64;
        for w in weights {
            mass[bucket(w)] += f64::from(w);
            total += f64::from(w);
        }
        let target = f64::from(top_p) * total;
        let mut above = 0.0f64;
        for edge in (0..BUCKETS).rev() {
            if above + mass[edge] >= target {
                return Some(Self { edge, above, target });
            }
            above += mass[edge];
        }
        None
    }

    /// Sorts the edge bucket's tokens by rank; how many of them the nucleus keeps.
    fn boundary_keep(&self, boundary: &mut [Candidate]) -> usize {
        boundary.sort_unstable_by(by_rank);
        let mut acc = self.above;
        for (i, c) in boundary.iter().enumerate() {
            acc += f64::from(c.weight);
            if acc >= self.target {
                return i + 1;
            }
        }
        boundary.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept_ids(weights: &[f32], top_p: f32) -> Vec<u32> {
        let mut cands: Vec<Candidate> =
            weights.iter().enumerate().map(|(i, &weight)| Candidate { id: i as u32, weight }).collect();
        keep_nucleus(&mut cands, top_p);
        let ids: Vec<u32> = cands.iter().map(|c| c.id).collect();
        let from_weights: Vec<u32> = nucleus_of(weights, top_p).iter().map(|c| c.id).collect();
        assert_eq!(from_weights, ids, "the same survivors in the same order");
        let mut ids = ids;
        ids.sort_unstable();
        ids
    }

    #[test]
    fn buckets_are_monotone_in_weight() {
        assert_eq!(bucket(1.0), BUCKETS - 1);
        assert!(bucket(0.5) < bucket(0.6));
        assert!(bucket(1e-30) < bucket(1e-20));
        assert_eq!(bucket(0.0), 0);
    }

    #[test]
    fn cut_falls_between_buckets() {
        // Mass 1, 0.75, 0.5, 0.25 of 2.5: top_p 0.7 needs 1.75 -> ids 0, 1.
        assert_eq!(kept_ids(&[1.0, 0.75, 0.5, 0.25], 0.7), vec![0, 1]);
        // top_p 0.71 needs 1.775 -> id 2 as well.
        assert_eq!(kept_ids(&[1.0, 0.75, 0.5, 0.25], 0.71), vec![0, 1, 2]);
        // A tiny top_p still keeps the most likely token.
        assert_eq!(kept_ids(&[0.25, 1.0, 0.5], 1e-6), vec![1]);
    }

    #[test]
    fn the_top_k_superset_holds_the_k_most_likely_and_their_ties() {
        let weights: Vec<f32> = (0..5000).map(|i| ((i * 7919) % 4999) as f32 / 4999.0).collect();
        for k in [1, 2, 40, 999, 4999, 5000] {
            let superset: Vec<u32> = top_k_superset(&weights, k).iter().map(|c| c.id).collect();
            let mut ranked: Vec<u32> = (0..weights.len() as u32).filter(|&i| weights[i as usize] > 0.0).collect();
            ranked.sort_by(|&a, &b| weights[b as usize].total_cmp(&weights[a as usize]).then(a.cmp(&b)));
            let kth = weights[ranked[(k - 1).min(ranked.len() - 1)] as usize];
            for &id in &ranked {
                if weights[id as usize] >= kth {
                    assert!(superset.contains(&id), "k {k}: token {id} missing");
                }
            }
            assert!(superset.windows(2).all(|w| w[0] < w[1]), "id order");
            assert!(superset.len() < weights.len() || k >= 4000, "k {k}: {} of {}", superset.len(), weights.len());
        }
    }

    #[test]
    fn cut_inside_one_bucket_uses_rank_then_id() {
        // 1000 equal tokens share a bucket: top_p 0.5 keeps the 500 lowest ids.
        let ids = kept_ids(&vec![1.0; 1000], 0.5);
        assert_eq!(ids, (0..500).collect::<Vec<u32>>());
        // 0.99 and 0.98 share a bucket below 1.0; inside it the heavier goes first.
        assert_eq!(kept_ids(&[0.98, 1.0, 0.99, 0.1], 0.3), vec![1]);
        assert_eq!(kept_ids(&[0.98, 1.0, 0.99, 0.1], 0.4), vec![1, 2]);
    }
}
