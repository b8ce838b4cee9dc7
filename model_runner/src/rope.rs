/// Rotary embedding tables indexed by absolute position, applied row by row so every token
/// of a packed batch can sit at its own position (prefill chunks, decodes, WeDLM windows).
pub struct Rope {
    cos: Vec<f32>,
    sin: Vec<f32>,
    half_dim: usize,
    max_positions: usize,
    interleaved: bool,
}

impl Rope {
    pub fn new(head_dim: usize, theta: f32, max_positions: usize, interleaved: bool) -> Self {
        let half_dim = head_dim / 2;
        // Same f32 formula as candle-transformers so positions rotate bit-identically.
        let inv_freq: Vec<f32> =
            (0..head_dim).step_by(2).map(|i| 1f32 / theta.powf(i as f32 / head_dim as f32)).collect();
        let mut cos = Vec::with_capacity(max_positions * half_dim);
        let mut sin = Vec::with_capacity(max_positions * half_dim);
        for pos in 0..max_positions {
            for &f in &inv_freq {
                let angle = pos as f32 * f;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        Self { cos, sin, half_dim, max_positions, interleaved }
    }

    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// Rotates `x` = `[rows, heads, head_dim]` in place; `positions[row]` must be < max_positions.
    pub fn apply(&self, x: &mut [f32], heads: usize, positions: &[u32]) {
        let head_dim = 2 * self.half_dim;
        for (row, &pos) in positions.iter().enumerate() {
            let table = pos as usize * self.half_dim;
            let cos = &self.cos[table..table + self.half_dim];
            let sin = &self.sin[table..table + self.half_dim];
            let row_data = &mut x[row * heads * head_dim..(row + 1) * heads * head_dim];
            for head in row_data.chunks_exact_mut(head_dim) {
                if self.interleaved {
                    for i in 0..self.half_dim {
                        let (a, b) = (head[2 * i], head[2 * i + 1]);
                        head[2 * i] = a * cos[i] - b * sin[i];
                        head[2 * i + 1] = a * sin[i] + b * cos[i];
                    }
                } else {
                    let (lo, hi) = head.split_at_mut(self.half_dim);
                    for i in 0..self.half_dim {
                        let (a, b) = (lo[i], hi[i]);
                        lo[i] = a * cos[i] - b * sin[i];
                        hi[i] = a * sin[i] + b * cos[i];
                    }
                }
            }
        }
    }
}
