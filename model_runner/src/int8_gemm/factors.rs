//! A packed weight's per-(column, block) scales and mins, stored in f16 where that loses
//! nothing.
//!
//! The GGML formats with f16 block scales (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; the mins of Q4_0 and
//! Q5_0 are -8 and -16 times the scale, still exact) keep 2 bytes per value: widening f16 to
//! f32 is exact, so the kernels compute the same bits as from f32. Q4_K's scales (an f16 times
//! a 6-bit sub-block scale) and re-quantized scales need f32. A batch-1 decode step streams
//! every weight byte from memory, and the scales are a sixth of a 4-bit weight's bytes in f32
//! (0.75 bytes per weight with a min) and an eleventh in f16 (0.625, the GGUF's own size).

use half::f16;

/// A weight's values, all f16 or all f32.
pub(crate) enum FactorVec {
    Half(Vec<f16>),
    Single(Vec<f32>),
}

/// A panel's share of a `FactorVec`, as the kernels read it.
#[derive(Clone, Copy)]
pub(crate) enum Factors<'a> {
    Half(&'a [f16]),
    Single(&'a [f32]),
}

impl FactorVec {
    /// Scales and mins in f16 when every value of both widens back to itself, else in f32; the
    /// two always share one width, so a kernel reads both the same way.
    pub(crate) fn narrowest(scales: Vec<f32>, mins: Vec<f32>) -> (FactorVec, FactorVec) {
        let exact = |v: &f32| f16::from_f32(*v).to_f32().to_bits() == v.to_bits();
        if scales.iter().chain(&mins).all(exact) {
            let half = |v: Vec<f32>| FactorVec::Half(v.into_iter().map(f16::from_f32).collect());
            (half(scales), half(mins))
        } else {
            (FactorVec::Single(scales), FactorVec::Single(mins))
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        match self {
            FactorVec::Half(v) => 2 * v.len(),
            FactorVec::Single(v) => 4 * v.len(),
        }
    }

    /// Values `start..end`.
    pub(crate) fn slice(&self, start: usize, end: usize) -> Factors<'_> {
        match self {
            FactorVec::Half(v) => Factors::Half(&v[start..end]),
            FactorVec::Single(v) => Factors::Single(&v[start..end]),
        }
    }
}

impl Factors<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Factors::Half(v) => v.len(),
            Factors::Single(v) => v.len(),
        }
    }

    pub(crate) fn is_half(&self) -> bool {
        matches!(self, Factors::Half(_))
    }

    /// Value `i` as f32.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> f32 {
        match self {
            Factors::Half(v) => v[i].to_f32(),
            Factors::Single(v) => v[i],
        }
    }

    /// The first value's address, for the SIMD kernels' loads (`is_half` gives the stride).
    #[inline(always)]
    pub(crate) fn as_ptr(&self) -> *const u8 {
        match self {
            Factors::Half(v) => v.as_ptr() as *const u8,
            Factors::Single(v) => v.as_ptr() as *const u8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_only_when_every_scale_and_min_is_exact() {
        let subnormal = f16::from_bits(3).to_f32();
        let (scales, mins) = FactorVec::narrowest(vec![0.5, -0.0078125, subnormal], vec![-4.0, 0.0, 65504.0]);
        assert!(scales.slice(0, 1).is_half() && mins.slice(0, 1).is_half());
        assert_eq!([scales.slice(0, 3).get(2), mins.slice(0, 3).get(2)], [subnormal, 65504.0]);
        // One min beyond f16's precision keeps both in f32, unrounded.
        let (scales, mins) = FactorVec::narrowest(vec![0.5, 0.25], vec![0.1, 0.0]);
        assert!(!scales.slice(0, 1).is_half() && !mins.slice(0, 1).is_half());
        assert_eq!(mins.slice(0, 1).get(0), 0.1);
        // Beyond f16's range, or below its smallest subnormal, stays f32 too.
        assert!(!FactorVec::narrowest(vec![70000.0], vec![]).0.slice(0, 1).is_half());
        assert!(!FactorVec::narrowest(vec![1e-9], vec![]).0.slice(0, 1).is_half());
    }
}
