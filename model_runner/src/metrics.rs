use serde::{Deserialize, Serialize};

/// Entropix attention metrics of one query row, in bits. By default over the positions that
/// exist; with a pad size, as the reference computes them over its zero-padded cache.
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

/// `scores` = `[heads, keys]` pre-softmax `q.k / sqrt(d)`, over the keys that exist.
pub fn attention_metrics(scores: &[f32], heads: usize, keys: usize) -> AttnMetrics {
    attention_metrics_padded(scores, heads, keys, None)
}

/// As [`attention_metrics`], but with `pad_to = Some(n)` the statistics are those of a softmax
/// over `n` slots where the `n - keys` slots past the real keys hold score 0: the reference
/// (xjdr-alt/entropix `sampler.py`) softmaxes the last layer's scores over its whole
/// preallocated cache (4096 slots for Llama-3.2-1B), whose empty slots have key 0, and its
/// thresholds were calibrated on that. The empty slots are never materialised: they all
/// share one probability `q_h = exp(0 - m_h) / Z_h` per head (`m_h` the max over real scores
/// and 0, `Z_h` the partition including `E * exp(-m_h)`), so each adds `-q_h log2 q_h` to the
/// head's entropy, `|q_h - mean_h q|` per head to the agreement sum and 0 to the score sum;
/// the averages run over `heads * n` cells. With `keys >= n` nothing is empty and the result
/// is the unpadded one (the reference's cache cannot hold more keys than slots).
pub fn attention_metrics_padded(scores: &[f32], heads: usize, keys: usize, pad_to: Option<usize>) -> AttnMetrics {
    let empty = pad_to.map_or(0, |n| n.saturating_sub(keys));
    let mut probs = scores.to_vec();
    // The probability every empty slot of head h takes (0 when nothing is padded).
    let mut empty_prob = vec![0f64; heads];
    let mut head_entropy = Vec::with_capacity(heads);
    for h in 0..heads {
        let p = &mut probs[h * keys..(h + 1) * keys];
        let mut max = p.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if empty > 0 {
            max = max.max(0.0);
        }
        let mut sum = 0f64;
        for v in p.iter_mut() {
            *v = (*v - max).exp();
            sum += *v as f64;
        }
        let empty_weight = f64::from(-max).exp();
        sum += empty as f64 * empty_weight;
        let mut entropy = 0f64;
        for v in p.iter_mut() {
            *v = (*v as f64 / sum) as f32;
            // The reference clips before the log so that p = 0 contributes 0, not NaN.
            let clipped = (*v as f64).clamp(1e-10, 1.0);
            entropy -= *v as f64 * clipped.log2();
        }
        if empty > 0 {
            let q = empty_weight / sum;
            empty_prob[h] = q;
            entropy -= empty as f64 * q * q.clamp(1e-10, 1.0).log2();
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
    if empty > 0 {
        let mean = empty_prob.iter().sum::<f64>() / heads as f64;
        agreement += empty as f64 * empty_prob.iter().map(|q| (q - mean).abs()).sum::<f64>();
    }
    let total = (heads * (keys + empty)) as f64;
    let interaction = scores.iter().map(|s| s.abs() as f64).sum::<f64>() / total;
    AttnMetrics {
        entropy: mean_entropy as f32,
        varentropy: varentropy as f32,
        agreement: (agreement / total) as f32,
        interaction_strength: interaction as f32,
    }
}
