//! The fused attention's softmax: exp as a polynomial rather than libm's `expf` called per
//! score (docs/benchmarks/notebook.md, "2026-11-22 19:10 UTC"), 8 scores at a time on AVX2.

use crate::attention_simd as simd;

/// Each head's scores in place: `exp(x - max)`, then normalized by their sum in key order.
pub(crate) fn softmax_in_place(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut j = 0;
    if simd::available() {
        while let Some(chunk) = x.get_mut(j..j + 8) {
            // SAFETY: `available()` checked; `chunk` holds 8 values.
            unsafe { simd::exp8_shifted(chunk, max) };
            j += 8;
        }
    }
    x[j..].iter_mut().for_each(|v| *v = exp_nonpositive(*v - max));
    let mut sum = 0f32;
    for v in x.iter() {
        sum += *v;
    }
    let inv = 1.0 / sum;
    x.iter_mut().for_each(|v| *v *= inv);
}

// Cephes' expf: exp(x) = 2^n * p(r), n = floor(x log2(e) + 1/2), r = x - n ln(2) in two parts.
pub(crate) const LOG2E: f32 = std::f32::consts::LOG2_E;
pub(crate) const LN2_HI: f32 = 0.693_359_4;
pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
pub(crate) const EXP_POLY: [f32; 6] = [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5];
/// Below this exp(x) would leave f32's normal range; softmax weights that small are noise.
pub(crate) const EXP_MIN_ARG: f32 = -87.336_55;

/// `exp(x)` for `x <= 0` within about 2 ulp, as the same fma sequence
/// `attention_simd::exp8_shifted` runs per lane (so a score's weight does not depend on which
/// path computed it). Public so that tests can mirror the kernel's arithmetic exactly.
#[inline]
pub fn exp_nonpositive(x: f32) -> f32 {
    let x = x.max(EXP_MIN_ARG);
    let n = x.mul_add(LOG2E, 0.5).floor();
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    let p = EXP_POLY[1..].iter().fold(EXP_POLY[0], |p, &c| p.mul_add(r, c));
    let y = p.mul_add(r * r, r) + 1.0;
    y * f32::from_bits(((n as i32 + 127) << 23) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector and scalar exp agree bit for bit and stay within 2 ulp of libm's.
    #[test]
    fn exp_matches_libm_and_both_paths_agree() {
        let xs: Vec<f32> =
            (0..4000).map(|i| -(i as f32) * 0.0231 - 1e-3 * (i % 7) as f32).chain([0.0, -87.0, -200.0]).collect();
        let mut vector = xs.clone();
        if simd::available() {
            for chunk in vector.chunks_exact_mut(8) {
                // SAFETY: AVX2+FMA checked above; chunks of 8.
                unsafe { simd::exp8_shifted(chunk, 0.0) };
            }
        }
        for (i, &x) in xs.iter().enumerate() {
            let ours = exp_nonpositive(x);
            if simd::available() && i < xs.len() / 8 * 8 {
                assert_eq!(vector[i].to_bits(), ours.to_bits(), "x = {x}");
            }
            let exact = (x as f64).exp();
            if exact >= f32::MIN_POSITIVE as f64 {
                let ulp = (exact as f32).to_bits().abs_diff(ours.to_bits());
                assert!(ulp <= 2, "exp({x}): {ours} vs {exact} ({ulp} ulp)");
            } else {
                assert!(ours < 1e-37, "exp({x}) = {ours}");
            }
        }
    }
}
