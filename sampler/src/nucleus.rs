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
    let mut mass = vec![0.0f64; BUCKETS];
    let mut total = 0.0f64;
    for c in cands.iter() {
        let w = f64::from(c.weight);
        mass[bucket(c.weight)] += w;
        total += w;
    }
    let target = f64::from(top_p) * total;

    let mut above = 0.0f64;
    let mut edge = None;
    for b in (0..BUCKETS).rev() {
        if above + mass[b] >= target {
            edge = Some(b);
            break;
        }
        above += mass[b];
    }
    // Rounding can leave the full sum a hair under `top_p * total`: keep everything.
    let Some(edge) = edge else {
        return;
    };

    let mut boundary: Vec<Candidate> = cands.iter().filter(|c| bucket(c.weight) == edge).copied().collect();
    boundary.sort_unstable_by(by_rank);
    let mut acc = above;
    let mut keep = boundary.len();
    for (i, c) in boundary.iter().enumerate() {
        acc += f64::from(c.weight);
        if acc >= target {
            keep = i + 1;
            break;
        }
    }
    cands.retain(|c| bucket(c.weight) > edge);
    cands.extend_from_slice(&boundary[..keep]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept_ids(weights: &[f32], top_p: f32) -> Vec<u32> {
        let mut cands: Vec<Candidate> =
            weights.iter().enumerate().map(|(i, &weight)| Candidate { id: i as u32, weight }).collect();
        keep_nucleus(&mut cands, top_p);
        let mut ids: Vec<u32> = cands.iter().map(|c| c.id).collect();
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
    fn cut_inside_one_bucket_uses_rank_then_id() {
        // 1000 equal tokens share a bucket: top_p 0.5 keeps the 500 lowest ids.
        let ids = kept_ids(&vec![1.0; 1000], 0.5);
        assert_eq!(ids, (0..500).collect::<Vec<u32>>());
        // 0.99 and 0.98 share a bucket below 1.0; inside it the heavier goes first.
        assert_eq!(kept_ids(&[0.98, 1.0, 0.99, 0.1], 0.3), vec![1]);
        assert_eq!(kept_ids(&[0.98, 1.0, 0.99, 0.1], 0.4), vec![1, 2]);
    }
}
