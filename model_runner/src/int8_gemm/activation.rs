//! Per-row int8 quantization of activations (ggml's Q8_1 scheme, with f32 scale and sum).
//!
//! Each 32-element block of a row gets its own scale `d = max|x| / 127` and quants
//! `round(x / d)` in `-127..=127` (never -128, which keeps the sign trick of the Q8_0 kernel
//! exact), plus `s = d * sum(q)`, which the Q4_1-style weights need for their min term, and
//! `-128 * sum(q)`, from which the VNNI kernels start a signed block's dot product when they
//! run its weights biased by 128 as unsigned bytes.
//! Every block depends only on its own 32 values, so a row quantizes the same in any batch.

use rayon::prelude::*;

use super::BLOCK;
use crate::ops::PARALLEL_FROM;

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
    /// `[rows][blocks]` `-128 * sum(q)` of each block: the dot product of signed weights
    /// biased by +128 carries `128 * sum(q)` too many. Kept in memory ready to broadcast, so a
    /// kernel starts its sums from it with a load instead of correcting them with arithmetic.
    pub(crate) bias_offsets: Vec<i32>,
}

impl QuantizedRows {
    pub fn rows(&self) -> usize {
        self.quants.len() / self.in_features.max(1)
    }

    /// Row `r`'s values as the kernel sees them (`d * q`), for reference computations.
    pub fn dequantize_row(&self, r: usize) -> Vec<f32> {
        let q = &self.quants[r * self.in_features..(r + 1) * self.in_features];
        q.iter().enumerate().map(|(j, &v)| self.scales[r * self.blocks + j / BLOCK] * v as f32).collect()
    }
}

/// Quantizes `[rows, in_features]` activations; `in_features` must be a multiple of `BLOCK`
/// (the packed weight guarantees it) and `x.len() == rows * in_features`.
pub fn quantize_rows(x: &[f32], rows: usize, in_features: usize) -> QuantizedRows {
    let blocks = in_features / BLOCK;
    let mut quants = vec![0i8; rows * in_features];
    let mut scales = vec![0.0f32; rows * blocks];
    let mut sums = vec![0.0f32; rows * blocks];
    let mut bias_offsets = vec![0i32; rows * blocks];
    if x.len() < PARALLEL_FROM {
        let outs = scales.iter_mut().zip(sums.iter_mut()).zip(bias_offsets.iter_mut());
        for ((xb, qb), ((d, s), q)) in x.chunks_exact(BLOCK).zip(quants.chunks_exact_mut(BLOCK)).zip(outs) {
            quantize_into(xb, qb, d, s, q);
        }
    } else {
        // A step's rows (up to the token budget) quantize on both cores rather than one while
        // the other waits for the matmul; blocks are independent, so the result is the same.
        let outs = scales.par_iter_mut().zip(sums.par_iter_mut()).zip(bias_offsets.par_iter_mut());
        x.par_chunks_exact(BLOCK)
            .zip(quants.par_chunks_exact_mut(BLOCK))
            .zip(outs)
            .with_min_len(256)
            .for_each(|((xb, qb), ((d, s), q))| quantize_into(xb, qb, d, s, q));
    }
    QuantizedRows { in_features, blocks, quants, scales, sums, bias_offsets }
}

/// One block into its quants, scale, `d * sum(q)` and `-128 * sum(q)`.
fn quantize_into(xb: &[f32], qb: &mut [i8], d_out: &mut f32, s_out: &mut f32, offset_out: &mut i32) {
    let (d, sum) = simd::quantize_block(xb, qb);
    *d_out = d;
    *s_out = d * sum as f32;
    *offset_out = -128 * sum;
}

/// One block: returns its scale and the sum of its quants. Rounding is half away from zero
/// (`f32::round`, as candle's Q8_1 quantization does), and NaN quantizes to 0.
fn quantize_block(xb: &[f32], qb: &mut [i8]) -> (f32, i32) {
    let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    let mut sum = 0i32;
    for (q, &v) in qb.iter_mut().zip(xb) {
        // `as i8` maps NaN to 0; |v * id| <= 127 up to rounding anyway.
        let r = (v * id).round().clamp(-127.0, 127.0) as i8;
        *q = r;
        sum += r as i32;
    }
    (d, sum)
}

/// The AVX2 version of `quantize_block`, bit-identical to it (max is exact in any order, and
/// each quant is the same multiply and round).
mod simd {
    pub(super) fn available() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            is_x86_feature_detected!("avx2")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Falls back to the scalar version without AVX2 or for blocks of another length.
    pub(super) fn quantize_block(xb: &[f32], qb: &mut [i8]) -> (f32, i32) {
        #[cfg(target_arch = "x86_64")]
        if xb.len() == super::BLOCK && qb.len() == super::BLOCK && available() {
            // SAFETY: AVX2 is present and both slices hold exactly the 32 elements read/written.
            return unsafe { imp::quantize_block(xb, qb) };
        }
        super::quantize_block(xb, qb)
    }

    #[cfg(target_arch = "x86_64")]
    mod imp {
        use std::arch::x86_64::*;

        /// # Safety
        ///
        /// The CPU must support AVX2, and `xb` and `qb` must each hold at least 32 (`BLOCK`)
        /// elements.
        #[target_feature(enable = "avx2")]
        pub(super) unsafe fn quantize_block(xb: &[f32], qb: &mut [i8]) -> (f32, i32) {
            let p = xb.as_ptr();
            let v =
                [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)), _mm256_loadu_ps(p.add(16)), _mm256_loadu_ps(p.add(24))];
            let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
            // `max(a, acc)` returns `acc` when `a` is NaN, so NaN is skipped as `f32::max` does.
            let mut m = _mm256_setzero_ps();
            for x in v {
                m = _mm256_max_ps(_mm256_and_ps(x, abs), m);
            }
            let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
            let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
            let d = amax / 127.0;
            let id = _mm256_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
            let (lo, hi) = (_mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
            let (one, half) = (_mm256_set1_ps(1.0), _mm256_set1_ps(0.5));
            let mut q = [_mm256_setzero_si256(); 4];
            for (qi, x) in q.iter_mut().zip(v) {
                // `f32::round`: truncate, then step away from zero when the dropped part is at
                // least one half (`x - t` is exact).
                let x = _mm256_mul_ps(x, id);
                let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(x);
                let frac = _mm256_and_ps(_mm256_sub_ps(x, t), abs);
                let away = _mm256_or_ps(_mm256_andnot_ps(abs, x), one);
                let r = _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(frac, half), away));
                let r = _mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(r, r));
                *qi = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
            }
            let s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            let s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
            let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
            let sum = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32::<1>(s2)));
            // Packing works within 128-bit lanes; the permute restores element order.
            let packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            let ordered = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256(qb.as_mut_ptr() as *mut __m256i, ordered);
            (d, sum)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(x: &[f32; BLOCK]) {
        let (mut qs, mut qv) = ([0i8; BLOCK], [0i8; BLOCK]);
        let scalar = quantize_block(x, &mut qs);
        let vector = simd::quantize_block(x, &mut qv);
        assert_eq!(scalar.0.to_bits(), vector.0.to_bits(), "scale of {x:?}");
        assert_eq!((scalar.1, qs), (vector.1, qv), "quants of {x:?}");
    }

    /// A batch large enough to quantize in parallel gives every block what the scalar
    /// quantization of that block alone gives.
    #[test]
    fn a_large_batch_quantizes_block_by_block() {
        let (rows, k) = (80, 512);
        assert!(rows * k >= PARALLEL_FROM);
        let x: Vec<f32> = (0..rows * k).map(|i| ((i * 2654435761) % 4093) as f32 / 511.0 - 4.0).collect();
        let act = quantize_rows(&x, rows, k);
        for (b, xb) in x.chunks_exact(BLOCK).enumerate() {
            let mut q = [0i8; BLOCK];
            let (d, sum) = quantize_block(xb, &mut q);
            assert_eq!(act.quants[b * BLOCK..(b + 1) * BLOCK], q, "block {b}");
            assert_eq!((act.scales[b].to_bits(), act.bias_offsets[b]), (d.to_bits(), -128 * sum), "block {b}");
            assert_eq!(act.sums[b].to_bits(), (d * sum as f32).to_bits(), "block {b}");
        }
    }

    #[test]
    fn vector_quantization_is_bit_identical_to_scalar() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..500 {
            let x: [f32; BLOCK] = std::array::from_fn(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 20) as f32 - 8.0
            });
            both(&x);
        }
        // Exact ties (x / d = k + 0.5 with d = 1), zeros, signed zeros, NaN and infinities.
        let ties: [f32; BLOCK] = std::array::from_fn(|i| if i == 0 { 127.0 } else { i as f32 - 15.5 });
        both(&ties);
        let near: [f32; BLOCK] = std::array::from_fn(|i| match i {
            0 => 127.0,
            _ => [0.49999997, -0.49999997, 1.4999999, -1.5000001, 0.5, -0.5][i % 6] + (i / 6) as f32,
        });
        both(&near);
        both(&[0.0; BLOCK]);
        both(&std::array::from_fn(|i| if i % 2 == 0 { -0.0 } else { 0.0 }));
        both(&std::array::from_fn(|i| if i == 3 { f32::NAN } else { i as f32 }));
        both(&std::array::from_fn(|i| if i == 7 { f32::INFINITY } else { -(i as f32) }));
        both(&std::array::from_fn(|i| if i == 9 { f32::NEG_INFINITY } else { f32::NAN }));
    }
}
