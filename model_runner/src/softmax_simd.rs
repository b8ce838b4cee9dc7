//! AVX-512 passes of `softmax`: a row's exps 16 at a time in one call, and the sums of up to
//! 16 rows taken together. The sums must be the scalar loop's adds (each row's scores added in
//! key order from zero), so 16 consecutive scores of each row are transposed in registers: one
//! vector add then takes the next key of every row, lane `r` carrying row `r`'s sum.

#[cfg(target_arch = "x86_64")]
pub(crate) use imp::*;

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    use crate::attention_simd::exp16_shifted;

    /// Rows `normalize_rows` sums together.
    pub(crate) const ROWS: usize = 16;

    /// `x[j] = exp(x[j] - max)` for the first `x.len() / 16 * 16` values (the operations of
    /// `exp16_shifted`); returns how many it took.
    ///
    /// # Safety
    ///
    /// Caller guarantees `attention_simd::available_512()`.
    #[target_feature(enable = "avx2,fma,avx512f")]
    pub(crate) unsafe fn exp_row(x: &mut [f32], max: f32) -> usize {
        let whole = x.len() / 16 * 16;
        for chunk in x[..whole].chunks_exact_mut(16) {
            exp16_shifted(chunk, max);
        }
        whole
    }

    /// Each row of `block` (up to `ROWS` rows of `row_len`) times `1 / sum`, its sum added in
    /// key order from zero.
    ///
    /// # Safety
    ///
    /// Caller guarantees `attention_simd::available_512()`, `row_len > 0` and that `block`
    /// holds whole rows, at most `ROWS` of them.
    #[target_feature(enable = "avx2,fma,avx512f")]
    pub(crate) unsafe fn normalize_rows(block: &mut [f32], row_len: usize) {
        let n = block.len() / row_len;
        let at = block.as_ptr();
        let mut sums = _mm512_setzero_ps();
        for j in (0..row_len).step_by(16) {
            let width = (row_len - j).min(16);
            let mask = lanes(width);
            // Masked: only the row's own values are read; the rows past `n` are zeros.
            let mut cols: [__m512; 16] = std::array::from_fn(|r| {
                if r < n {
                    _mm512_maskz_loadu_ps(mask, at.add(r * row_len + j))
                } else {
                    _mm512_setzero_ps()
                }
            });
            transpose(&mut cols);
            for &col in &cols[..width] {
                sums = _mm512_add_ps(sums, col);
            }
        }
        let mut inverses = [0f32; 16];
        _mm512_storeu_ps(inverses.as_mut_ptr(), _mm512_div_ps(_mm512_set1_ps(1.0), sums));
        for (row, &inverse) in block.chunks_exact_mut(row_len).zip(&inverses) {
            let inverse = _mm512_set1_ps(inverse);
            for j in (0..row_len).step_by(16) {
                let (mask, p) = (lanes((row_len - j).min(16)), row.as_mut_ptr().add(j));
                _mm512_mask_storeu_ps(p, mask, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, p), inverse));
            }
        }
    }

    /// The mask of the first `width` lanes.
    #[inline(always)]
    fn lanes(width: usize) -> __mmask16 {
        ((1u32 << width) - 1) as __mmask16
    }

    /// `m[c]` lane `r` becomes `m[r]` lane `c`. Pairs of rows interleaved, then quadruples, which
    /// leaves in 128-bit lane `k` of `u[4g + i]` column `4k + i` of rows `4g..4g + 4`; a 4 x 4
    /// transpose of 128-bit lanes over `u[i], u[4 + i], u[8 + i], u[12 + i]` finishes it.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn transpose(m: &mut [__m512; 16]) {
        let mut t = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_ps(m[2 * i], m[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(m[2 * i], m[2 * i + 1]);
        }
        let pd = _mm512_castps_pd;
        let mut u = [_mm512_setzero_ps(); 16];
        for g in 0..4 {
            let (a, b, c, d) = (pd(t[4 * g]), pd(t[4 * g + 1]), pd(t[4 * g + 2]), pd(t[4 * g + 3]));
            u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
            u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
            u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
            u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
        }
        for i in 0..4 {
            let (a, b, c, d) = (u[i], u[4 + i], u[8 + i], u[12 + i]);
            let (ab_lo, ab_hi) = (_mm512_shuffle_f32x4::<0x44>(a, b), _mm512_shuffle_f32x4::<0xEE>(a, b));
            let (cd_lo, cd_hi) = (_mm512_shuffle_f32x4::<0x44>(c, d), _mm512_shuffle_f32x4::<0xEE>(c, d));
            m[i] = _mm512_shuffle_f32x4::<0x88>(ab_lo, cd_lo);
            m[4 + i] = _mm512_shuffle_f32x4::<0xDD>(ab_lo, cd_lo);
            m[8 + i] = _mm512_shuffle_f32x4::<0x88>(ab_hi, cd_hi);
            m[12 + i] = _mm512_shuffle_f32x4::<0xDD>(ab_hi, cd_hi);
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn transpose_swaps_rows_and_columns() {
            if !crate::attention_simd::available_512() {
                return;
            }
            let values: Vec<f32> = (0..256).map(|i| i as f32).collect();
            // SAFETY: AVX-512F checked above; each row reads 16 of the 256 values.
            let mut m: [__m512; 16] = std::array::from_fn(|r| unsafe { _mm512_loadu_ps(values.as_ptr().add(16 * r)) });
            // SAFETY: as above.
            unsafe { transpose(&mut m) };
            for (c, col) in m.iter().enumerate() {
                let mut lanes = [0f32; 16];
                // SAFETY: as above; `lanes` holds 16 values.
                unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), *col) };
                let want: Vec<f32> = (0..16).map(|r| (16 * r + c) as f32).collect();
                assert_eq!(lanes.to_vec(), want, "column {c}");
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod fallback {
    //! Never called: `attention_simd::available_512()` is false off x86_64.
    pub(crate) const ROWS: usize = 16;
    /// # Safety
    ///
    /// Same contract as the x86_64 version; this one does nothing.
    pub(crate) unsafe fn exp_row(_: &mut [f32], _: f32) -> usize {
        0
    }
    /// # Safety
    ///
    /// Same contract as the x86_64 version; this one does nothing.
    pub(crate) unsafe fn normalize_rows(_: &mut [f32], _: usize) {}
}
#[cfg(not(target_arch = "x86_64"))]
pub(crate) use fallback::*;
