//! The 8-bit KV cache format: each K and V row is stored as int8 values with one f16 scale per
//! group of `Q8_GROUP` values of a head (llama.cpp's `q8_0` layout, so the two engines' 8-bit
//! caches keep the same information and a comparison of them compares kernels). A value is
//! `scale * q` with `q` in -127..=127 and `scale = max |x| / 127` over its group, rounded once
//! when a step's rows are written.
//!
//! Why a group per token and head rather than per channel (KIVI): a per-channel key scale
//! spans many tokens, so it is known only once a group of tokens exists (KIVI keeps the newest
//! tokens in full precision until then), and a row written by one step could change with the
//! rows after it, which prefix caching and batch invariance both forbid. Per-channel scales pay
//! off at 2-4 bits, where a few outlier channels would take the whole range; at 8 bits a group
//! of 32 keeps an outlier's damage inside its own 32 values.
//!
//! A head whose width is not a multiple of 32 (tiny test models) has one group per head.

use half::f16;
use half::vec::HalfBitsVecExt;

/// Values per scale where a head's width allows it.
pub const Q8_GROUP: usize = 32;

/// Values per scale for heads of `head_dim`.
pub fn group_size(head_dim: usize) -> usize {
    if head_dim.is_multiple_of(Q8_GROUP) {
        Q8_GROUP
    } else {
        head_dim
    }
}

/// K and V rows as int8 with their scales: `k[i]` is worth `k_scales[i / group] * k[i]`.
pub struct Q8Values {
    pub k: Vec<i8>,
    pub v: Vec<i8>,
    pub k_scales: Vec<f16>,
    pub v_scales: Vec<f16>,
    /// Values per scale.
    pub group: usize,
}

impl Q8Values {
    /// `len` values of zero bits (pages the pool never uses are never touched).
    pub(crate) fn zeros(len: usize, group: usize) -> Self {
        let scales = || vec![0u16; len / group].reinterpret_into();
        Self { k: vec![0; len], v: vec![0; len], k_scales: scales(), v_scales: scales(), group }
    }

    /// Quantizes rows of f32 K and V (`len` a multiple of `group`).
    pub fn quantize(k: &[f32], v: &[f32], group: usize) -> Self {
        let narrow = |scales: Vec<f32>| scales.into_iter().map(f16::from_f32).collect();
        let ((k, k_scales), (v, v_scales)) = (quantize_groups(k, group), quantize_groups(v, group));
        Self { k, v, k_scales: narrow(k_scales), v_scales: narrow(v_scales), group }
    }

    /// Copies `len` values (whole groups) of `src` from `from` to `to`.
    pub(crate) fn copy_from(&mut self, to: usize, src: &Q8Values, from: usize, len: usize) {
        let g = self.group;
        self.k[to..to + len].copy_from_slice(&src.k[from..from + len]);
        self.v[to..to + len].copy_from_slice(&src.v[from..from + len]);
        self.k_scales[to / g..(to + len) / g].copy_from_slice(&src.k_scales[from / g..(from + len) / g]);
        self.v_scales[to / g..(to + len) / g].copy_from_slice(&src.v_scales[from / g..(from + len) / g]);
    }

    /// Copies `len` values (whole groups) from `from` to `to`, with their scales.
    pub(crate) fn copy_within(&mut self, from: usize, to: usize, len: usize) {
        let g = self.group;
        self.k.copy_within(from..from + len, to);
        self.v.copy_within(from..from + len, to);
        self.k_scales.copy_within(from / g..(from + len) / g, to / g);
        self.v_scales.copy_within(from / g..(from + len) / g, to / g);
    }

    /// `len` K and V values from `at` (whole groups), as f32.
    pub fn dequantize(&self, at: usize, len: usize) -> (Vec<f32>, Vec<f32>) {
        let g = self.group;
        let widen = |q: &[i8], scales: &[f16]| {
            q[at..at + len].iter().enumerate().map(|(i, &x)| scales[(at + i) / g].to_f32() * x as f32).collect()
        };
        (widen(&self.k, &self.k_scales), widen(&self.v, &self.v_scales))
    }
}

/// A group's scale and its inverse (both 0 for an all-zero group).
pub(crate) fn scale_of(values: &[f32]) -> (f32, f32) {
    let max = values.iter().fold(0f32, |m, v| m.max(v.abs()));
    let scale = max / 127.0;
    (scale, if scale > 0.0 { 1.0 / scale } else { 0.0 })
}

/// Symmetric int8 per group of `group` values, as ggml's `quantize_row_q8_0`: the values are
/// divided by the exact scale (the cache then stores it as f16; a query, quantized the same way
/// for the attention kernel, keeps it in f32). `values[i]` is worth `scales[i / group] * values[i]`.
pub(crate) fn quantize_groups(x: &[f32], group: usize) -> (Vec<i8>, Vec<f32>) {
    let mut values = Vec::with_capacity(x.len());
    let scales = x
        .chunks_exact(group)
        .map(|g| {
            let (scale, inverse) = scale_of(g);
            values.extend(g.iter().map(|&v| (v * inverse).round() as i8));
            scale
        })
        .collect();
    (values, scales)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_comes_back_within_half_a_step_of_its_group() {
        let x: Vec<f32> = (0..96).map(|i| ((i * 37 % 101) as f32 - 50.0) * if i < 32 { 10.0 } else { 0.01 }).collect();
        let q = Q8Values::quantize(&x, &x, 32);
        let (k, v) = q.dequantize(0, 96);
        assert_eq!(k, v);
        for (g, (orig, back)) in x.chunks(32).zip(k.chunks(32)).enumerate() {
            let max = orig.iter().fold(0f32, |m, v| m.max(v.abs()));
            let step = max / 127.0;
            for (a, b) in orig.iter().zip(back) {
                // Half a step from rounding, plus the f16 rounding of the scale (2^-11 of it).
                assert!((a - b).abs() <= 0.5 * step + max * 1e-3, "group {g}: {a} came back as {b}");
            }
        }
        // An outlier in the first group does not coarsen the others.
        assert!((x[40] - k[40]).abs() < 0.01 / 127.0 * 51.0);
    }

    #[test]
    fn zeros_stay_zero_and_copies_keep_scales() {
        let x: Vec<f32> = (0..64).map(|i| i as f32 / 7.0).collect();
        let src = Q8Values::quantize(&x, &x, 32);
        let mut dst = Q8Values::zeros(128, 32);
        assert_eq!(dst.dequantize(0, 128).0, vec![0.0; 128]);
        dst.copy_from(64, &src, 0, 64);
        assert_eq!(dst.dequantize(64, 64), src.dequantize(0, 64));
        assert_eq!(dst.dequantize(0, 64).0, vec![0.0; 64]);
    }

    #[test]
    fn heads_that_are_not_a_multiple_of_32_get_one_scale_each() {
        assert_eq!(group_size(64), 32);
        assert_eq!(group_size(16), 16);
        let (q, s) = quantize_groups(&[1.0, -2.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0], 4);
        assert_eq!(q[..4], [64, -127, 32, 0]);
        assert_eq!(s, vec![2.0 / 127.0, 0.0]);
    }
}
