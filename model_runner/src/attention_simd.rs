//! AVX2 paths of the f32 cache's attention kernel: the scores of 8 keys at once (their 8 lane
//! accumulators reduced together by `hadd`s, one key's sum per lane instead of a horizontal sum
//! per key), the softmax's exp 8 (or 16) scores at a time, and the probability-weighted sum of
//! value rows. Each performs, lane for lane, the operations of the scalar code in
//! `attention.rs`, so a result does not depend on which path computed it.

/// AVX-512F beside `available()`: the softmax's exp 16 values at a time.
pub(crate) fn available_512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        available() && is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Asks for `row`'s cache lines ahead of use (a hint: no effect on results).
#[inline]
pub(crate) fn prefetch<T>(row: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let bytes = std::mem::size_of_val(row);
        for line in (0..bytes).step_by(64) {
            // SAFETY: `prefetch` does not dereference or fault; the address is inside `row`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>((row.as_ptr() as *const i8).add(line)) };
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use imp::*;

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    use entrobatch_math::{EXP_MIN_ARG, EXP_POLY, LN2_HI, LN2_LO, LOG2E};

    /// `out[j] = dot(q, keys[j][at..at + q.len()]) * scale` with `attention::dot`'s lanes and
    /// tree.
    ///
    /// # Safety
    ///
    /// Caller guarantees `available()`, `q.len() % 8 == 0`, `keys[j].len() >= at + q.len()`
    /// for every `j`, and `out.len() >= 8`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn dot8(q: &[f32], keys: &[&[f32]; 8], at: usize, scale: f32, out: &mut [f32]) {
        let mut acc = [_mm256_setzero_ps(); 8];
        for c in (0..q.len()).step_by(8) {
            let qc = _mm256_loadu_ps(q.as_ptr().add(c));
            for j in 0..8 {
                acc[j] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(keys[j].as_ptr().add(at + c)), acc[j]);
            }
        }
        _mm256_storeu_ps(out.as_mut_ptr(), _mm256_mul_ps(sum_lanes(&acc), _mm256_set1_ps(scale)));
    }

    /// Lane j of the result: `acc[j]`'s 8 lanes summed as `((0 + 1) + (2 + 3)) + ((4 + 5) +
    /// (6 + 7))`. hadd twice: lane j of the low (high) half of `u0`/`u1` holds `acc[j]`'s lanes
    /// 0..4 (4..8) summed as (0 + 1) + (2 + 3); adding the halves completes the tree.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn sum_lanes(acc: &[__m256; 8]) -> __m256 {
        let t0 = _mm256_hadd_ps(acc[0], acc[1]);
        let t1 = _mm256_hadd_ps(acc[2], acc[3]);
        let t2 = _mm256_hadd_ps(acc[4], acc[5]);
        let t3 = _mm256_hadd_ps(acc[6], acc[7]);
        let (u0, u1) = (_mm256_hadd_ps(t0, t1), _mm256_hadd_ps(t2, t3));
        let lo = _mm256_permute2f128_ps::<0x20>(u0, u1);
        let hi = _mm256_permute2f128_ps::<0x31>(u0, u1);
        _mm256_add_ps(lo, hi)
    }

    /// `x[l] = entrobatch_math::exp_nonpositive(x[l] - max)` for the 8 values of `x`, lane for lane
    /// the same operations.
    ///
    /// # Safety
    ///
    /// Caller guarantees `available()` and `x.len() >= 8`.
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn exp8_shifted(x: &mut [f32], max: f32) {
        let v = _mm256_sub_ps(_mm256_loadu_ps(x.as_ptr()), _mm256_set1_ps(max));
        let v = _mm256_max_ps(v, _mm256_set1_ps(EXP_MIN_ARG));
        let n = _mm256_floor_ps(_mm256_fmadd_ps(v, _mm256_set1_ps(LOG2E), _mm256_set1_ps(0.5)));
        let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), v);
        let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
        let mut p = _mm256_set1_ps(EXP_POLY[0]);
        for &c in &EXP_POLY[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0));
        let exponent = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
        let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(exponent));
        _mm256_storeu_ps(x.as_mut_ptr(), _mm256_mul_ps(y, scale));
    }

    /// `exp8_shifted` over 16 values in one 512-bit register: the same operations lane for
    /// lane.
    ///
    /// # Safety
    ///
    /// Caller guarantees `available_512()` and `x.len() >= 16`.
    #[inline]
    #[target_feature(enable = "avx2,fma,avx512f")]
    pub(crate) unsafe fn exp16_shifted(x: &mut [f32], max: f32) {
        let v = _mm512_sub_ps(_mm512_loadu_ps(x.as_ptr()), _mm512_set1_ps(max));
        let v = _mm512_max_ps(v, _mm512_set1_ps(EXP_MIN_ARG));
        let n = _mm512_fmadd_ps(v, _mm512_set1_ps(LOG2E), _mm512_set1_ps(0.5));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(n);
        let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), v);
        let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
        let mut p = _mm512_set1_ps(EXP_POLY[0]);
        for &c in &EXP_POLY[1..] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
        }
        let y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0));
        let exponent = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
        let scale = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(exponent));
        _mm512_storeu_ps(x.as_mut_ptr(), _mm512_mul_ps(y, scale));
    }

    /// `out[d] = sum_j probs[j] * value(j)[d]`, one fma per key in key order from zero (as
    /// `attention::weighted_sum`); each 64-wide chunk of `out` stays in 8 registers over all
    /// keys.
    ///
    /// # Safety
    ///
    /// Caller guarantees `available()`, `out.len() % 8 == 0` and `out.len()` readable values at
    /// `value(j)` for every `j` in `0..probs.len()`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn weighted_sum(probs: &[f32], value: impl Fn(usize) -> *const f32, out: &mut [f32]) {
        let mut d0 = 0;
        while d0 + 64 <= out.len() {
            let mut acc = [_mm256_setzero_ps(); 8];
            for (j, &p) in probs.iter().enumerate() {
                let (p, v) = (_mm256_set1_ps(p), value(j).add(d0));
                for (c, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(p, _mm256_loadu_ps(v.add(8 * c)), *a);
                }
            }
            for (c, &a) in acc.iter().enumerate() {
                _mm256_storeu_ps(out.as_mut_ptr().add(d0 + 8 * c), a);
            }
            d0 += 64;
        }
        while d0 + 8 <= out.len() {
            let mut acc = _mm256_setzero_ps();
            for (j, &p) in probs.iter().enumerate() {
                acc = _mm256_fmadd_ps(_mm256_set1_ps(p), _mm256_loadu_ps(value(j).add(d0)), acc);
            }
            _mm256_storeu_ps(out.as_mut_ptr().add(d0), acc);
            d0 += 8;
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod fallback {
    //! Never called: `available()` is false off x86_64.
    /// # Safety
    ///
    /// Same contract as the x86_64 version; this one does nothing.
    pub(crate) unsafe fn dot8(_: &[f32], _: &[&[f32]; 8], _: usize, _: f32, _: &mut [f32]) {}
    /// # Safety
    ///
    /// Same contract as the x86_64 version; this one does nothing.
    pub(crate) unsafe fn exp8_shifted(_: &mut [f32], _: f32) {}
    /// # Safety
    ///
    /// Same contract as the x86_64 version; this one does nothing.
    pub(crate) unsafe fn exp16_shifted(_: &mut [f32], _: f32) {}
    /// # Safety
    ///
    /// Same contract as the x86_64 version; this one does nothing.
    pub(crate) unsafe fn weighted_sum(_: &[f32], _: impl Fn(usize) -> *const f32, _: &mut [f32]) {}
}
#[cfg(not(target_arch = "x86_64"))]
pub(crate) use fallback::*;
