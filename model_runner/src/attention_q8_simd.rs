//! x86 paths of `attention_q8`: eight keys scored at once (their lane accumulators reduced
//! together, as `attention_simd::dot8` does), and the value sum from int8 rows. The integer
//! products use the sign trick of ggml's q8_0 dot: `|q|` as the unsigned operand and `k` with
//! `q`'s sign as the signed one, so `vpdpbusd` (or `pmaddubsw`, whose pair sums stay below
//! 2 * 127 * 127 and never saturate) multiplies two signed int8 vectors exactly.

use crate::attention_q8::Q8Kernel;

pub(crate) fn supports_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

pub(crate) fn supports_avx_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        supports_avx2() && is_x86_feature_detected!("avxvnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

pub(crate) fn supports_avx512_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        supports_avx2() && is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `out[l]` = `attention_q8::dot(q, q_scales, keys[l], scales[l], 32)` for the 8 keys, with
/// `kernel`'s integer dot product.
///
/// # Safety
///
/// `kernel` must be supported and not `Scalar`; `q.len()` a multiple of 32 and `q_scales`
/// `q.len() / 32` long; every key at least `q.len()` values and every scale slice at least
/// `q.len() / 32`.
pub(crate) unsafe fn dot8(
    kernel: Q8Kernel,
    q: &[i8],
    q_scales: &[f32],
    keys: &[&[i8]; 8],
    scales: &[&[f32]; 8],
    out: &mut [f32; 8],
) {
    #[cfg(target_arch = "x86_64")]
    match kernel {
        Q8Kernel::Avx2 => imp::dot8_avx2(q, q_scales, keys, scales, out),
        Q8Kernel::AvxVnni => imp::dot8_avx_vnni(q, q_scales, keys, scales, out),
        Q8Kernel::Avx512Vnni => imp::dot8_avx512_vnni(q, q_scales, keys, scales, out),
        Q8Kernel::Scalar => unreachable!("the scalar kernel has no vector path"),
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (kernel, q, q_scales, keys, scales, out);
}

/// `out[d] = sum_j (probs[j] * scales_j[d / 32]) * values_j[d]` as `attention_q8::weighted_sum`.
///
/// # Safety
///
/// AVX2 and FMA must be available; `out.len()` a multiple of 32; `value(j)` for every `j` in
/// `0..probs.len()` at least `out.len()` values and `out.len() / 32` scales.
pub(crate) unsafe fn weighted_sum<'a>(probs: &[f32], value: impl Fn(usize) -> (&'a [i8], &'a [f32]), out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    imp::weighted_sum(probs, value, out);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (probs, value, out);
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    /// The eight i32 lane sums of `|q| x (k with q's sign)` over 32 values, three ways.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn lanes_avx2(q_abs: __m256i, k_signed: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(q_abs, k_signed), _mm256_set1_epi16(1))
    }

    #[inline]
    #[target_feature(enable = "avx2,avxvnni")]
    fn lanes_avx_vnni(q_abs: __m256i, k_signed: __m256i) -> __m256i {
        _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), q_abs, k_signed)
    }

    #[inline]
    #[target_feature(enable = "avx2,avx512vnni,avx512vl")]
    fn lanes_avx512_vnni(q_abs: __m256i, k_signed: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), q_abs, k_signed)
    }

    macro_rules! dot8 {
        ($name:ident, $features:literal, $lanes:ident) => {
            /// # Safety
            ///
            /// See `super::dot8`.
            #[target_feature(enable = $features)]
            pub(crate) unsafe fn $name(
                q: &[i8],
                q_scales: &[f32],
                keys: &[&[i8]; 8],
                scales: &[&[f32]; 8],
                out: &mut [f32; 8],
            ) {
                let mut acc = [_mm256_setzero_ps(); 8];
                for c in 0..q.len() / 32 {
                    let q_signed = _mm256_loadu_si256(q.as_ptr().add(32 * c) as *const __m256i);
                    let q_abs = _mm256_abs_epi8(q_signed);
                    let q_scale = *q_scales.get_unchecked(c);
                    for j in 0..8 {
                        let k = _mm256_loadu_si256(keys[j].as_ptr().add(32 * c) as *const __m256i);
                        let lanes = _mm256_cvtepi32_ps($lanes(q_abs, _mm256_sign_epi8(k, q_signed)));
                        acc[j] = _mm256_fmadd_ps(lanes, _mm256_set1_ps(q_scale * *scales[j].get_unchecked(c)), acc[j]);
                    }
                }
                _mm256_storeu_ps(out.as_mut_ptr(), crate::attention_simd::sum_lanes(&acc));
            }
        };
    }

    dot8!(dot8_avx2, "avx2,fma", lanes_avx2);
    dot8!(dot8_avx_vnni, "avx2,fma,avxvnni", lanes_avx_vnni);
    dot8!(dot8_avx512_vnni, "avx2,fma,avx512vnni,avx512vl", lanes_avx512_vnni);

    /// Eight int8 values at `p` as f32.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load8(p: *const i8) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i)))
    }

    /// # Safety
    ///
    /// See `super::weighted_sum`.
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn weighted_sum<'a>(
        probs: &[f32],
        value: impl Fn(usize) -> (&'a [i8], &'a [f32]),
        out: &mut [f32],
    ) {
        // Two groups (64 values) per pass over the keys where the head allows, so a head of 64
        // reads each value row once.
        let mut d0 = 0;
        while d0 < out.len() {
            let groups = if d0 + 64 <= out.len() { 2 } else { 1 };
            let mut acc = [_mm256_setzero_ps(); 8];
            for (j, &p) in probs.iter().enumerate() {
                let (v, scales) = value(j);
                for g in 0..groups {
                    let c = d0 / 32 + g;
                    let w = _mm256_set1_ps(p * *scales.get_unchecked(c));
                    for i in 0..4 {
                        let x = load8(v.as_ptr().add(32 * c + 8 * i));
                        acc[4 * g + i] = _mm256_fmadd_ps(w, x, acc[4 * g + i]);
                    }
                }
            }
            for (i, &a) in acc.iter().take(4 * groups).enumerate() {
                _mm256_storeu_ps(out.as_mut_ptr().add(d0 + 8 * i), a);
            }
            d0 += 32 * groups;
        }
    }
}
