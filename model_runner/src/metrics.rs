use serde::{Deserialize, Serialize};

/// Entropix attention metrics of one query row, in bits, over the positions that exist
/// (masked mode: the reference's zero-padded `max_seq_len` slots are not imitated).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AttnMetrics {
    /// Mean over heads of each head's attention entropy.
    pub entropy: f32,
    /// Population variance across heads of the per-head entropy.
    pub varentropy: f32,
    /// Mean absolute deviation of each head's attention from the head-mean attention.
    pub agreement: f32,
    /// Mean absolute pre-softmax score.
    pub interaction_strength: f32,
}

/// `scores` = `[heads, keys]` pre-softmax `q.k / sqrt(d)`.
pub fn attention_metrics(scores: &[f32], heads: usize, keys: usize) -> AttnMetrics {
    let mut probs = scores.to_vec();
    let mut head_entropy = Vec::with_capacity(heads);
    for h in 0..heads {
        let p = &mut probs[h * keys..(h + 1) * keys];
        let max = p.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f64;
        for v in p.iter_mut() {
            *v = (*v - max).exp();
            sum += *v as f64;
        }
        let mut entropy = 0f64;
        for v in p.iter_mut() {
            *v = (*v as f64 / sum) as f32;
            let clipped = (*v as f64).clamp(1e-10, 1.0);
            entropy -= *v as f64 * clipped.log2();
        }
        head_entropy.push(entropy);
    }
    let mean_entropy = head_entropy.iter().sum::<f64>() / heads as f64;
    let varentropy = head_entropy.iter().map(|e| (e - mean_entropy).powi(2)).sum::<f64>() / heads as f64;
    let mut agreement = 0f64;
    for k in 0..keys {
        let mean = (0..heads).map(|h| probs[h * keys + k] as f64).sum::<f64>() / heads as f64;
        agreement += (0..heads).map(|h| (probs[h * keys + k] as f64 - mean).abs()).sum::<f64>();
    }
    let total = (heads * keys) as f64;
    let interaction = scores.iter().map(|s| s.abs() as f64).sum::<f64>() / total;
    AttnMetrics {
        entropy: mean_entropy as f32,
        varentropy: varentropy as f32,
        agreement: (agreement / total) as f32,
        interaction_strength: interaction as f32,
    }
}
