//! The gated activations `gate = act(gate) * up` with the exponential in vector registers.
//!
//! Both are `v / (1 + exp(a(v))) * up`: SiLU with `a(v) = -v` (candle's `v / (1 + exp(-v))`),
//! and the tanh-approximated GELU `0.5 v (1 + tanh(y))`, `y = sqrt(2/pi) v (1 + 0.044715 v^2)`,
//! with `a(v) = -2y`, since `0.5 (1 + tanh(y)) = 1 / (1 + exp(-2y))` (the form also keeps its
//! precision where `1 + tanh(y)` cancels, at large negative `v`).
//!
//! candle computes `exp` with the platform's `expf`; on glibc (2.27 and later, x86-64 CPUs with
//! FMA) that is ARM's optimized-routines algorithm: widen to f64, reduce by `k / 32` of ln 2, a
//! 32-entry table of `2^(i/32)`, a degree-3 polynomial, narrow to f32. Each of its f64
//! operations is correctly rounded, so running the same operations in the same order (and the
//! same fusions, read off glibc's `__expf_fma`) four lanes at a time gives the same bits, at a
//! fraction of a scalar call per element (docs/benchmarks/notebook.md, "2026-11-26 06:16-07:51
//! UTC"). Arguments outside the fast range (|x| >= 88, NaN, infinities) take the scalar call.
//! A platform whose `expf` is another algorithm would break the bit-identity with
//! candle-transformers' models, so the first call checks the vector path against `f32::exp` on
//! a spread of arguments and keeps the scalar path for good if any result differs.

use std::sync::OnceLock;

/// `gate[i] = gate[i] / (1 + exp(-gate[i])) * up[i]`, bit-identical to the scalar expression.
pub(crate) fn silu_mul_chunk(gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    dispatch(gate, up, imp::silu_mul, silu_scalar);
    #[cfg(not(target_arch = "x86_64"))]
    silu_scalar(gate, up);
}

/// `gate[i] = gelu_tanh(gate[i]) * up[i]` as `v / (1 + exp(-2y)) * u`, bit-identical to that
/// scalar expression.
pub(crate) fn gelu_tanh_mul_chunk(gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    dispatch(gate, up, imp::gelu_tanh_mul, gelu_tanh_scalar);
    #[cfg(not(target_arch = "x86_64"))]
    gelu_tanh_scalar(gate, up);
}

/// The vector path where the CPU has it and it reproduces `expf`, else the scalar one.
#[cfg(target_arch = "x86_64")]
fn dispatch(gate: &mut [f32], up: &[f32], vector: unsafe fn(&mut [f32], &[f32]), scalar: fn(&mut [f32], &[f32])) {
    if vector_exp_matches() {
        // SAFETY: `vector_exp_matches` returned true only after detecting AVX2 and FMA, all
        // that the vector paths require.
        unsafe { vector(gate, up) }
    } else {
        scalar(gate, up)
    }
}

fn silu_scalar(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// `-2 sqrt(2/pi)`: the GELU's exponent is `GELU_SCALE * v * (1 + GELU_CUBIC * v * v)`.
const GELU_SCALE: f32 = -1.595_769_2;
const GELU_CUBIC: f32 = 0.044_715;

fn gelu_tanh_scalar(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        let v = *g;
        *g = v / (1.0 + (GELU_SCALE * v * (1.0 + GELU_CUBIC * v * v)).exp()) * u;
    }
}

/// Whether this CPU runs the vector path and it reproduces the platform's `expf` (checked once).
fn vector_exp_matches() -> bool {
    static MATCHES: OnceLock<bool> = OnceLock::new();
    *MATCHES.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // 2^16 arguments across the fast range, plus tiny and integral ones.
            let probes: Vec<f32> = (0..1 << 16)
                .map(|i| -87.99 + 175.98 * i as f32 / 65536.0)
                .chain(
                    (0..64)
                        .map(|i| f32::from_bits(0x3000_0000 + i * 0x0100_0000) * if i % 2 == 0 { 1.0 } else { -1.0 }),
                )
                .chain((-87..88).map(|i| i as f32))
                .collect();
            let mut got = probes.clone();
            // SAFETY: AVX2 and FMA were detected just above.
            unsafe { imp::exp_in_place(&mut got) };
            return got.iter().zip(&probes).all(|(g, x)| g.to_bits() == x.exp().to_bits());
        }
        false
    })
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    /// `2^(i/32)` with `i << 47` taken off its bits (glibc's `__exp2f_data.tab`): adding
    /// `k << 47` back scales it by `2^(k div 32)`.
    const TABLE: [u64; 32] = [
        0x3ff0000000000000,
        0x3fefd9b0d3158574,
        0x3fefb5586cf9890f,
        0x3fef9301d0125b51,
        0x3fef72b83c7d517b,
        0x3fef54873168b9aa,
        0x3fef387a6e756238,
        0x3fef1e9df51fdee1,
        0x3fef06fe0a31b715,
        0x3feef1a7373aa9cb,
        0x3feedea64c123422,
        0x3feece086061892d,
        0x3feebfdad5362a27,
        0x3feeb42b569d4f82,
        0x3feeab07dd485429,
        0x3feea47eb03a5585,
        0x3feea09e667f3bcd,
        0x3fee9f75e8ec5f74,
        0x3feea11473eb0187,
        0x3feea589994cce13,
        0x3feeace5422aa0db,
        0x3feeb737b0cdc5e5,
        0x3feec49182a3f090,
        0x3feed503b23e255d,
        0x3feee89f995ad3ad,
        0x3feeff76f2fb5e47,
        0x3fef199bdd85529c,
        0x3fef3720dcef9069,
        0x3fef5818dcfba487,
        0x3fef7c97337b9b5f,
        0x3fefa4afa2a490da,
        0x3fefd0765b6e4540,
    ];
    /// 32 / ln 2.
    const INV_LN2_N: u64 = 0x40471547652b82fe;
    /// The polynomial's coefficients, scaled for `r` in units of ln 2 / 32.
    const C0: u64 = 0x3ebc6af84b912394;
    const C1: u64 = 0x3f2ebfce50fac4f3;
    const C2: u64 = 0x3f962e42ff0c52d6;
    /// 1.5 * 2^52: adding it rounds to an integer held in the low mantissa bits.
    const SHIFT: u64 = 0x4338000000000000;
    /// Arguments whose top 12 bits (sign cleared) exceed this (|x| >= 88, NaN, infinities)
    /// leave glibc's fast path.
    const FAST_TOP: i32 = 0x42a;

    #[inline]
    #[target_feature(enable = "avx")]
    fn f64x4(bits: u64) -> __m256d {
        _mm256_set1_pd(f64::from_bits(bits))
    }

    /// `exp` of 4 arguments in the fast range.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn exp4(x: __m128) -> __m128 {
        let (inv, shift) = (f64x4(INV_LN2_N), f64x4(SHIFT));
        let xd = _mm256_cvtps_pd(x);
        let kd_shifted = _mm256_fmadd_pd(inv, xd, shift);
        let ki = _mm256_castpd_si256(kd_shifted);
        let kd = _mm256_sub_pd(kd_shifted, shift);
        let r = _mm256_fmsub_pd(inv, xd, kd);
        let index = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
        // SAFETY: every index is below 32, the table's length.
        let t = unsafe { _mm256_i64gather_epi64::<8>(TABLE.as_ptr() as *const i64, index) };
        let s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64::<47>(ki)));
        let p = _mm256_fmadd_pd(r, f64x4(C0), f64x4(C1));
        let r2 = _mm256_mul_pd(r, r);
        let q = _mm256_fmadd_pd(r, f64x4(C2), _mm256_set1_pd(1.0));
        let y = _mm256_fmadd_pd(p, r2, q);
        _mm256_cvtpd_ps(_mm256_mul_pd(y, s))
    }

    /// `exp` of 8 arguments, or `None` if one of them leaves the fast path.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn exp8(x: __m256) -> Option<__m256> {
        let top = _mm256_and_si256(_mm256_srli_epi32::<20>(_mm256_castps_si256(x)), _mm256_set1_epi32(0x7ff));
        if _mm256_movemask_epi8(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(FAST_TOP))) != 0 {
            return None;
        }
        let low = exp4(_mm256_castps256_ps128(x));
        let high = exp4(_mm256_extractf128_ps::<1>(x));
        Some(_mm256_insertf128_ps::<1>(_mm256_castps128_ps256(low), high))
    }

    /// `gate = gate / (1 + exp(exponent(gate))) * up`, eight at a time; `scalar` is the same
    /// expression one element at a time, for the tail and for arguments off the fast path.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn gated_mul(gate: &mut [f32], up: &[f32], exponent: impl Fn(__m256) -> __m256, scalar: fn(&mut [f32], &[f32])) {
        let n = gate.len().min(up.len());
        let one = _mm256_set1_ps(1.0);
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: `i + 8 <= n` elements of both slices.
            let (g, u) = unsafe { (_mm256_loadu_ps(gate.as_ptr().add(i)), _mm256_loadu_ps(up.as_ptr().add(i))) };
            match exp8(exponent(g)) {
                Some(e) => {
                    let v = _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
                    // SAFETY: as for the loads.
                    unsafe { _mm256_storeu_ps(gate.as_mut_ptr().add(i), v) };
                }
                None => scalar(&mut gate[i..i + 8], &up[i..i + 8]),
            }
            i += 8;
        }
        scalar(&mut gate[i..n], &up[i..n]);
    }

    /// # Safety
    ///
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
        let sign = _mm256_set1_ps(-0.0);
        gated_mul(gate, up, |g| _mm256_xor_ps(g, sign), super::silu_scalar);
    }

    /// # Safety
    ///
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
        let (scale, cubic, one) =
            (_mm256_set1_ps(super::GELU_SCALE), _mm256_set1_ps(super::GELU_CUBIC), _mm256_set1_ps(1.0));
        // Multiplications and the addition in the scalar expression's order, unfused, for its bits.
        let exponent = |v| {
            let inner = _mm256_add_ps(one, _mm256_mul_ps(_mm256_mul_ps(cubic, v), v));
            _mm256_mul_ps(_mm256_mul_ps(scale, v), inner)
        };
        gated_mul(gate, up, exponent, super::gelu_tanh_scalar);
    }

    /// `x = exp(x)` for every element, the vector path wherever it applies.
    ///
    /// # Safety
    ///
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_in_place(x: &mut [f32]) {
        let mut chunks = x.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: `c` holds 8 elements.
            let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
            match exp8(v) {
                // SAFETY: as for the load.
                Some(e) => unsafe { _mm256_storeu_ps(c.as_mut_ptr(), e) },
                None => c.iter_mut().for_each(|v| *v = v.exp()),
            }
        }
        chunks.into_remainder().iter_mut().for_each(|v| *v = v.exp());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector path gives `f32::exp`'s bits over the whole fast range, walked through the
    /// f32 bit patterns (every 61st, both signs), and outside it (the scalar fallback).
    #[test]
    fn the_vector_exponential_has_the_platform_bits() {
        #[cfg(target_arch = "x86_64")]
        {
            let capable = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
            // glibc's expf is the algorithm mirrored here, so with glibc the self-check must pass.
            assert!(
                !(capable && cfg!(target_env = "gnu")) || vector_exp_matches(),
                "the vector exp disagrees with glibc's expf"
            );
            if !vector_exp_matches() {
                eprintln!("the vector exp is not used here (no AVX2+FMA, or another libm): nothing to compare");
                return;
            }
            let special = [88.0, -88.0, 100.0, -104.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN_POSITIVE];
            let patterns: Vec<u32> = (0..0x42b0_0000u32).step_by(61).collect();
            let (mut checked, mut mismatches) = (0, 0);
            for batch in patterns.chunks(1 << 14) {
                let mut xs: Vec<f32> =
                    batch.iter().flat_map(|&b| [f32::from_bits(b), -f32::from_bits(b)]).chain(special).collect();
                let want: Vec<u32> = xs.iter().map(|x| x.exp().to_bits()).collect();
                // SAFETY: `vector_exp_matches` detected AVX2 and FMA.
                unsafe { imp::exp_in_place(&mut xs) };
                mismatches += xs.iter().zip(&want).filter(|(g, w)| g.to_bits() != **w).count();
                checked += xs.len();
            }
            assert_eq!(mismatches, 0, "{mismatches} of {checked} arguments differ from f32::exp");
        }
    }

    /// Both activations match their scalar expressions bit for bit, including arguments that
    /// take the fallback and a tail shorter than a vector.
    #[test]
    fn gated_activations_match_their_scalar_expressions() {
        let gate: Vec<f32> =
            (0..1003).map(|i| (i as f32 - 500.0) * 0.37 + if i % 101 == 0 { 95.0 } else { 0.0 }).collect();
        let up: Vec<f32> = (0..1003).map(|i| 1.0 + (i % 13) as f32 * 0.25).collect();
        let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        for (name, fast, slow) in [
            ("silu", silu_mul_chunk as fn(&mut [f32], &[f32]), silu_scalar as fn(&mut [f32], &[f32])),
            ("gelu_tanh", gelu_tanh_mul_chunk, gelu_tanh_scalar),
        ] {
            let (mut a, mut b) = (gate.clone(), gate.clone());
            fast(&mut a, &up);
            slow(&mut b, &up);
            assert_eq!(bits(&a), bits(&b), "{name}");
        }
    }

    /// The exponential form of the GELU is the tanh formula (candle's and ggml's), in f64, to
    /// within the f32 rounding of its exponent `z = -2y` (four roundings, so a relative error of
    /// up to `3 |z|` ulps in `exp(z)`) plus a few ulps, down to where `1 + tanh(y)` cancels even
    /// in f64; below that it is a tiny negative number, never NaN.
    #[test]
    fn gelu_as_a_sigmoid_is_the_tanh_formula() {
        for i in -4000..=4000 {
            let v = i as f32 * 0.005;
            let mut got = [v];
            gelu_tanh_mul_chunk(&mut got, &[1.0]);
            let x = v as f64;
            let y = 0.797_884_560_802_865_4 * x * (1.0 + 0.044715 * x * x);
            let want = 0.5 * x * (1.0 + y.tanh());
            if v >= -5.0 {
                let ulps =
                    (got[0] as f64 - want).abs() / (f32::EPSILON as f64 * want.abs().max(f32::MIN_POSITIVE as f64));
                assert!(ulps <= 4.0 + 6.0 * y.abs(), "gelu({v}) = {} against {want}: {ulps:.1} ulps", got[0]);
            } else {
                assert!(got[0] <= 0.0 && got[0] > -1e-6, "gelu({v}) = {}", got[0]);
            }
        }
    }
}
