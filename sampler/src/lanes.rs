//! Passes over a vocabulary-sized row in independent lanes. A single running maximum or sum
//! is a dependency chain the compiler must keep scalar; lanes let it use vector registers,
//! and `exp_nonpositive` (a polynomial, where libm's `expf` is a call per value) keeps the
//! softmax passes vectorized too. A row is up to 152K values, 64 rows a step.

use entrobatch_math::{exp_nonpositive, EXP_MIN_ARG};

const LANES: usize = 16;

/// The maximum of a row's values (NaN never wins; -inf for an empty row).
pub(crate) fn max_of(values: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let (whole, rest) = values.as_chunks::<LANES>();
    for block in whole {
        for (lane, &v) in lanes.iter_mut().zip(block) {
            *lane = if v > *lane { v } else { *lane };
        }
    }
    rest.iter().chain(&lanes).fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// `exp(l - max)` for `l <= max`; exactly 0 where libm's would leave f32's normal range, and
/// for a banned (-inf) or NaN logit, whose share of the partition must be none.
#[inline]
pub(crate) fn shifted_exp(l: f32, max: f32) -> f32 {
    let s = l - max;
    if s >= EXP_MIN_ARG {
        exp_nonpositive(s)
    } else {
        0.0
    }
}

/// `sum f(v)` over `values`, each lane adding its share in f64.
#[inline]
pub(crate) fn sum_f64(values: &[f32], f: impl Fn(f32) -> f64) -> f64 {
    let mut lanes = [0f64; LANES];
    let (whole, rest) = values.as_chunks::<LANES>();
    for block in whole {
        for (lane, &v) in lanes.iter_mut().zip(block) {
            *lane += f(v);
        }
    }
    let mut total = lanes.iter().sum::<f64>();
    for &v in rest {
        total += f(v);
    }
    total
}

/// `sum e` and `sum e * s` with `s = l - max` and `e = exp(s)`, in one exp pass: the
/// partition function and the (unnormalized) mean score of a softmax.
pub(crate) fn partition_sums(logits: &[f32], max: f32) -> (f64, f64) {
    let (mut z, mut first) = ([0f64; LANES], [0f64; LANES]);
    let term = move |l: f32| {
        let e = shifted_exp(l, max);
        // A zero weight's score may be -inf: 0 * -inf would be NaN.
        let s = if e > 0.0 { l - max } else { 0.0 };
        (f64::from(e), f64::from(e) * f64::from(s))
    };
    let (whole, rest) = logits.as_chunks::<LANES>();
    for block in whole {
        for ((z, first), &l) in z.iter_mut().zip(first.iter_mut()).zip(block) {
            let (e, es) = term(l);
            *z += e;
            *first += es;
        }
    }
    let (mut z, mut first) = (z.iter().sum::<f64>(), first.iter().sum::<f64>());
    for &l in rest {
        let (e, es) = term(l);
        z += e;
        first += es;
    }
    (z, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_passes_match_scalar_ones() {
        for len in [0, 1, 15, 16, 17, 49_152 + 5] {
            let row: Vec<f32> = (0..len)
                .map(|i| if i % 97 == 3 { f32::NEG_INFINITY } else { ((i * 7919) % 1013) as f32 * 0.021 - 9.0 })
                .collect();
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(max_of(&row), max);
            let (z, first) = partition_sums(&row, max);
            let exact: Vec<(f64, f64)> = row
                .iter()
                .filter(|l| l.is_finite())
                .map(|&l| {
                    let s = f64::from(l - max);
                    (s.exp(), s.exp() * s)
                })
                .collect();
            let (want_z, want_first) = (exact.iter().map(|t| t.0).sum::<f64>(), exact.iter().map(|t| t.1).sum::<f64>());
            assert!((z - want_z).abs() <= 1e-6 * want_z.max(1e-30), "{len}: z {z} against {want_z}");
            assert!(
                (first - want_first).abs() <= 1e-6 * want_first.abs().max(1e-30),
                "{len}: {first} against {want_first}"
            );
            assert_eq!(sum_f64(&row, |v| f64::from(shifted_exp(v, max))), z);
        }
        assert_eq!(shifted_exp(f32::NEG_INFINITY, 0.0), 0.0);
        assert_eq!(shifted_exp(f32::NAN, 0.0), 0.0);
        assert_eq!(shifted_exp(2.0, 2.0), 1.0);
        assert_eq!(shifted_exp(-200.0, 0.0), 0.0);
    }
}
