//! Per-row int8 quantization of activations (ggml's Q8_1 scheme, with f32 scale and sum).
//!
//! Each 32-element block of a row gets its own scale `d = max|x| / 127` and quants
//! `round(x / d)` in `-127..=127` (never -128, which keeps the sign trick of the Q8_0 kernel
//! exact), plus `s = d * sum(q)`, which the Q4_1-style weights need for their min term.
//! Every block depends only on its own 32 values, so a row quantizes the same in any batch.

use super::BLOCK;

/// `rows` quantized activation rows of `in_features` values each.
pub struct QuantizedRows {
    pub(crate) in_features: usize,
    pub(crate) blocks: usize,
    /// `[rows][in_features]` quants.
    pub(crate) quants: Vec<i8>,
    /// `[rows][blocks]` scales `d`.
    pub(crate) scales: Vec<f32>,
    /// `[rows][blocks]` `d * sum(q)` of each block.
    pub(crate) sums: Vec<f32>,
}

impl QuantizedRows {
    pub fn rows(&self) -> usize {
        self.quants.len() / self.in_features.max(1)
    }

    /// Row `r`'s values as the kernel sees them (`d * q`), for reference computations.
    pub fn dequantize_row(&self, r: usize) -> Vec<f32> {
        let q = &self.quants[r * self.in_features..(r + 1) * self.in_features];
        q.iter()
            .enumerate()
            .map(|(j, &v)| self.scales[r * self.blocks + j / BLOCK] * v as f32)
            .collect()
    }
}

/// Quantizes `[rows, in_features]` activations; `in_features` must be a multiple of `BLOCK`
/// (the packed weight guarantees it) and `x.len() == rows * in_features`.
pub fn quantize_rows(x: &[f32], rows: usize, in_features: usize) -> QuantizedRows {
    let blocks = in_features / BLOCK;
    let mut quants = vec![0i8; rows * in_features];
    let mut scales = vec![0.0f32; rows * blocks];
    let mut sums = vec![0.0f32; rows * blocks];
    for ((xb, qb), (d_out, s_out)) in x
        .chunks_exact(BLOCK)
        .zip(quants.chunks_exact_mut(BLOCK))
        .zip(scales.iter_mut().zip(sums.iter_mut()))
    {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in qb.iter_mut().zip(xb) {
            // `as i8` saturates (and maps NaN to 0); |v * id| <= 127 up to rounding anyway.
            let r = (v * id).round().clamp(-127.0, 127.0) as i8;
            *q = r;
            sum += r as i32;
        }
        *d_out = d;
        *s_out = d * sum as f32;
    }
    QuantizedRows { in_features, blocks, quants, scales, sums }
}
