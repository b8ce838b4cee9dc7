use crate::config::RopeConfig;

/// Rotary embedding tables indexed by absolute position, applied row by row so every token
/// of a packed batch can sit at its own position (prefill chunks, decodes, WeDLM windows).
pub struct Rope {
    cos: Vec<f32>,
    sin: Vec<f32>,
    /// Rotated pairs per head (`rotary_dim / 2`).
    half_rot: usize,
    head_dim: usize,
    max_positions: usize,
    interleaved: bool,
}

impl Rope {
    /// Tables for `max_positions` positions. The angle of pair `i` at position `p` is
    /// `p * theta^(-2i / rotary_dim) * freq_scale / freq_factors[i]`, and cos and sin are
    /// multiplied by `attn_factor` (ggml's `rope_ext` without YaRN extrapolation).
    pub fn new(config: &RopeConfig, head_dim: usize, max_positions: usize) -> Self {
        let rot = config.rotary_dim.min(head_dim);
        let half_rot = rot / 2;
        // Same f32 formula as candle-transformers, and a scale or factor of 1 changes no bit,
        // so plain RoPE rotates bit-identically to its models.
        let inv_freq: Vec<f32> = (0..rot)
            .step_by(2)
            .enumerate()
            .map(|(pair, i)| {
                let base = 1f32 / config.theta.powf(i as f32 / rot as f32);
                let factor = config.freq_factors.as_ref().and_then(|f| f.get(pair)).copied().unwrap_or(1.0);
                base * config.freq_scale / factor
            })
            .collect();
        let mut cos = Vec::with_capacity(max_positions * half_rot);
        let mut sin = Vec::with_capacity(max_positions * half_rot);
        for pos in 0..max_positions {
            for &f in &inv_freq {
                let angle = pos as f32 * f;
                cos.push(angle.cos() * config.attn_factor);
                sin.push(angle.sin() * config.attn_factor);
            }
        }
        Self { cos, sin, half_rot, head_dim, max_positions, interleaved: config.interleaved }
    }

    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// The mean of `x` (`[heads, head_dim]`) rotated to each of the table's positions in turn:
    /// a pair that turns slowly keeps its value, one that turns many times averages out.
    pub fn mean_rotation(&self, x: &[f32], heads: usize) -> Vec<f32> {
        let half = self.half_rot;
        let (mut mean_cos, mut mean_sin) = (vec![0f64; half], vec![0f64; half]);
        for (cos, sin) in self.cos.chunks_exact(half.max(1)).zip(self.sin.chunks_exact(half.max(1))) {
            for i in 0..half {
                mean_cos[i] += cos[i] as f64;
                mean_sin[i] += sin[i] as f64;
            }
        }
        let n = self.max_positions.max(1) as f64;
        let (mean_cos, mean_sin): (Vec<f32>, Vec<f32>) =
            mean_cos.iter().zip(&mean_sin).map(|(c, s)| ((c / n) as f32, (s / n) as f32)).unzip();
        let mut out = x.to_vec();
        let pairs = |i: usize| if self.interleaved { (2 * i, 2 * i + 1) } else { (i, i + half) };
        for head in out.chunks_exact_mut(self.head_dim).take(heads) {
            for i in 0..half {
                let (a, b) = pairs(i);
                let (xa, xb) = (head[a], head[b]);
                head[a] = xa * mean_cos[i] - xb * mean_sin[i];
                head[b] = xa * mean_sin[i] + xb * mean_cos[i];
            }
        }
        out
    }

    /// Rotates `x` = `[rows, heads, head_dim]` in place; `positions[row]` must be < max_positions.
    pub fn apply(&self, x: &mut [f32], heads: usize, positions: &[u32]) {
        let (head_dim, half) = (self.head_dim, self.half_rot);
        for (row, &pos) in positions.iter().enumerate() {
            let table = pos as usize * half;
            let cos = &self.cos[table..table + half];
            let sin = &self.sin[table..table + half];
            let row_data = &mut x[row * heads * head_dim..(row + 1) * heads * head_dim];
            for head in row_data.chunks_exact_mut(head_dim) {
                if self.interleaved {
                    for i in 0..half {
                        let (a, b) = (head[2 * i], head[2 * i + 1]);
                        head[2 * i] = a * cos[i] - b * sin[i];
                        head[2 * i + 1] = a * sin[i] + b * cos[i];
                    }
                } else {
                    let (lo, hi) = head[..2 * half].split_at_mut(half);
                    for i in 0..half {
                        let (a, b) = (lo[i], hi[i]);
                        lo[i] = a * cos[i] - b * sin[i];
                        hi[i] = a * sin[i] + b * cos[i];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One head rotated by the definition: each pair `(x_a, x_b)` turns by its angle, scaled.
    fn rotate_by_definition(x: &[f32], pos: f32, cfg: &RopeConfig) -> Vec<f32> {
        let rot = cfg.rotary_dim;
        let mut out = x.to_vec();
        for i in 0..rot / 2 {
            let factor = cfg.freq_factors.as_ref().map_or(1.0, |f| f[i] as f64);
            let freq = (cfg.theta as f64).powf(-((2 * i) as f64) / rot as f64) * cfg.freq_scale as f64 / factor;
            let (c, s) = ((pos as f64 * freq).cos(), (pos as f64 * freq).sin());
            let (a, b) = if cfg.interleaved { (2 * i, 2 * i + 1) } else { (i, i + rot / 2) };
            let (xa, xb) = (x[a] as f64, x[b] as f64);
            let m = cfg.attn_factor as f64;
            out[a] = ((xa * c - xb * s) * m) as f32;
            out[b] = ((xa * s + xb * c) * m) as f32;
        }
        out
    }

    /// The mean rotation is the average of `apply` over every position: computed here
    /// position by position, for a vector with slow and fast pairs, in both pairings.
    #[test]
    fn the_mean_rotation_averages_every_position() {
        for interleaved in [false, true] {
            let cfg = RopeConfig {
                theta: 1e6,
                rotary_dim: 8,
                interleaved,
                freq_scale: 1.0,
                attn_factor: 1.0,
                freq_factors: None,
            };
            let rope = Rope::new(&cfg, 8, 3000);
            let x: Vec<f32> = (0..16).map(|i| (i as f32 - 7.5) * 3.0).collect();
            let mut sum = vec![0f64; 16];
            for pos in 0..3000u32 {
                let mut y = x.clone();
                rope.apply(&mut y, 2, &[pos]);
                sum.iter_mut().zip(&y).for_each(|(s, v)| *s += *v as f64);
            }
            let mean = rope.mean_rotation(&x, 2);
            for (i, (m, s)) in mean.iter().zip(&sum).enumerate() {
                assert!((*m as f64 - s / 3000.0).abs() < 1e-3, "{interleaved} {i}: {m} against {}", s / 3000.0);
            }
            // The fastest pair (one radian a position) averages out; the slowest barely turns.
            let (fast, slow) = if interleaved { (0, 6) } else { (0, 3) };
            assert!(mean[fast].abs() < 0.05 * x[fast].abs());
            assert!((mean[slow] - x[slow]).abs() < 0.05 * x[slow].abs());
        }
    }

    /// Partial rotation, linear scaling, frequency factors and the attention factor, in both
    /// pairings, agree with the rotation written out in f64.
    #[test]
    fn scaled_partial_rope_matches_the_definition() {
        let head_dim = 16;
        let x: Vec<f32> = (0..head_dim).map(|i| (i as f32 * 0.37).sin() + 0.1).collect();
        for interleaved in [false, true] {
            let cfg = RopeConfig {
                theta: 10_000.0,
                rotary_dim: 12,
                interleaved,
                freq_scale: 0.125,
                attn_factor: 1.19,
                freq_factors: Some(vec![1.0, 1.5, 2.0, 4.0, 8.0, 32.0]),
            };
            let rope = Rope::new(&cfg, head_dim, 300);
            let mut got = x.clone();
            rope.apply(&mut got, 1, &[257]);
            let want = rotate_by_definition(&x, 257.0, &cfg);
            for (d, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((g - w).abs() < 2e-4, "interleaved={interleaved} dim {d}: {g} vs {w}");
            }
            assert_eq!(&got[12..], &x[12..], "dims past rotary_dim must pass through");
        }
    }
}
