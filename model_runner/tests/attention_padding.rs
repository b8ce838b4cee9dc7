//! `attention_metrics_padded` against the reference's computation done densely: the scores
//! really padded with zeros to N slots, then xjdr-alt/entropix `sampler.py` @ cceeb84
//! `calculate_metrics` (after the #17 varentropy fix; spec shared/specs/entropix_mti.md A.2)
//! in f64:
//!
//! ```python
//! attention_probs = jax.nn.softmax(attention_scores, axis=-1)
//! attn_entropy = -jnp.sum(attention_probs * jnp.log2(jnp.clip(attention_probs, 1e-10, 1.0)), axis=-1)
//! attn_varentropy = jnp.var(attn_entropy, axis=1)
//! mean_attention = jnp.mean(attention_probs, axis=1)
//! agreement = jnp.mean(jnp.abs(attention_probs - mean_attention[:, None, :]), axis=(1, 2))
//! interaction_strength = jnp.mean(jnp.abs(attention_scores), axis=(1, 2, 3))
//! ```
//!
//! (then `jnp.mean` of entropy and varentropy over the batch of one).

use entrobatch_model_runner::metrics::{attention_metrics, attention_metrics_padded, AttnMetrics};

/// The reference's four numbers over `scores` padded with zeros to `n` slots per head.
fn dense_padded(scores: &[f32], heads: usize, keys: usize, n: usize) -> [f64; 4] {
    let slots = n.max(keys);
    let padded: Vec<f64> = (0..heads)
        .flat_map(|h| (0..slots).map(move |k| if k < keys { f64::from(scores[h * keys + k]) } else { 0.0 }))
        .collect();
    let mut probs = vec![0f64; heads * slots];
    let mut ent = vec![0f64; heads];
    for h in 0..heads {
        let row = &padded[h * slots..(h + 1) * slots];
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = row.iter().map(|s| (s - max).exp()).sum();
        for k in 0..slots {
            let p = (row[k] - max).exp() / z;
            probs[h * slots + k] = p;
            ent[h] -= p * p.clamp(1e-10, 1.0).log2();
        }
    }
    let mean = ent.iter().sum::<f64>() / heads as f64;
    let var = ent.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / heads as f64;
    let mut agreement = 0.0;
    for k in 0..slots {
        let m = (0..heads).map(|h| probs[h * slots + k]).sum::<f64>() / heads as f64;
        agreement += (0..heads).map(|h| (probs[h * slots + k] - m).abs()).sum::<f64>();
    }
    let cells = (heads * slots) as f64;
    let strength = padded.iter().map(|s| s.abs()).sum::<f64>() / cells;
    [mean, var, agreement / cells, strength]
}

fn assert_matches(got: AttnMetrics, want: [f64; 4], what: &str) {
    let got = [got.entropy, got.varentropy, got.agreement, got.interaction_strength];
    let names = ["entropy", "varentropy", "agreement", "interaction_strength"];
    for ((g, w), name) in got.iter().zip(want).zip(names) {
        let tol = 2e-5 * w.abs() + 1e-9;
        assert!((f64::from(*g) - w).abs() <= tol, "{what} {name}: {g} vs dense {w}");
    }
}

/// Scores of the sizes real heads produce, with a per-head offset (so some heads are far
/// above 0, where the empty slots' probabilities fall under the reference's 1e-10 clip, and
/// some entirely below 0, where the empty slots hold the maximum).
fn scores(heads: usize, keys: usize, seed: u64) -> Vec<f32> {
    // A fixed pseudo-random spread in [-4, 4) (Knuth's multiplicative hash of the index).
    let spread = |i: usize| ((i as u64 * 2_654_435_761 + seed * 97) % 8192) as f32 / 1024.0 - 4.0;
    (0..heads * keys).map(|i| [-6.0, 0.0, 3.0, 25.0][(i / keys) % 4] + spread(i)).collect()
}

#[test]
fn padded_metrics_match_a_dense_zero_padded_softmax() {
    for (heads, keys, n) in [(1, 1, 8), (4, 7, 16), (8, 33, 64), (32, 300, 4096), (14, 100, 4096), (4, 9, 9)] {
        for seed in 0..3 {
            let s = scores(heads, keys, seed);
            let got = attention_metrics_padded(&s, heads, keys, Some(n));
            assert_matches(got, dense_padded(&s, heads, keys, n), &format!("{heads}x{keys} -> {n}"));
        }
    }
}

#[test]
fn padding_changes_the_statistics_and_none_or_too_small_is_the_unpadded_one() {
    let (heads, keys) = (8, 40);
    let s = scores(heads, keys, 9);
    let plain = attention_metrics(&s, heads, keys);
    assert_eq!(attention_metrics_padded(&s, heads, keys, None), plain);
    // More keys than slots: nothing is empty (the reference's cache never holds more).
    assert_eq!(attention_metrics_padded(&s, heads, keys, Some(10)), plain);
    assert_matches(plain, dense_padded(&s, heads, keys, keys), "unpadded");
    // Padded to 4096, the low-scoring heads spread over ~4096 slots: the mean entropy moves
    // by bits, the whole point of the option.
    let padded = attention_metrics_padded(&s, heads, keys, Some(4096));
    assert!(padded.entropy > plain.entropy + 1.0, "{padded:?} vs {plain:?}");
    assert!(padded.interaction_strength < plain.interaction_strength / 50.0);
}
