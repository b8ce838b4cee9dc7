//! What the benches share: reproducible weights and activations.

/// `n` deterministic values in [-0.1, 0.1) (xorshift): the magnitude of a small model's
/// weights, so quantized formats see realistic block scales.
pub fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2
        })
        .collect()
}
