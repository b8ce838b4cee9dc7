//! The fused attention's softmax: exp as a polynomial rather than libm's `expf` called per
//! score (docs/benchmarks/notebook.md, "2026-11-22 19:10 UTC"), 16 or 8 scores at a time on
//! AVX-512 or AVX2, and the heads' sums taken side by side.

/// The kernels' exp, so tests can mirror their arithmetic exactly.
pub use entrobatch_math::exp_nonpositive;

use crate::attention_simd as simd;
use crate::softmax_simd;

/// Each row of `rows` (rows of `row_len` scores, one per head) in place: `exp(x - max)`, then
/// normalized by its sum taken in key order. The rows' sums run side by side, one add of each
/// row per key (16 rows in the lanes of one register on AVX-512, 8 scalar chains otherwise), so
/// the chains overlap instead of each waiting on its own previous add; each row's sum is still
/// the same sequence of adds, so the result does not depend on the rows beside it or the CPU
/// (the f32 cache stays bit-comparable with candle's attention).
pub(crate) fn softmax_rows(rows: &mut [f32], row_len: usize) {
    if row_len == 0 {
        return;
    }
    for x in rows.chunks_exact_mut(row_len) {
        exp_shifted(x, max_of(x));
    }
    if simd::available_512() {
        for block in rows.chunks_mut(softmax_simd::ROWS * row_len) {
            // SAFETY: `available_512()` checked; `row_len > 0` and `block` holds whole rows,
            // at most `ROWS`.
            unsafe { softmax_simd::normalize_rows(block, row_len) };
        }
    } else {
        normalize_side_by_side(rows, row_len);
    }
}

/// Each row of `rows` times `1 / sum`, the sums of `SIDE_BY_SIDE` rows added key by key in
/// scalar chains (`softmax_simd::normalize_rows`'s adds, without its registers).
fn normalize_side_by_side(rows: &mut [f32], row_len: usize) {
    for block in rows.chunks_mut(SIDE_BY_SIDE * row_len) {
        let mut sums = [0f32; SIDE_BY_SIDE];
        let n = block.len() / row_len;
        for j in 0..row_len {
            for (r, sum) in sums.iter_mut().enumerate().take(n) {
                *sum += block[r * row_len + j];
            }
        }
        for (x, sum) in block.chunks_exact_mut(row_len).zip(sums) {
            let inv = 1.0 / sum;
            x.iter_mut().for_each(|v| *v *= inv);
        }
    }
}

/// Rows whose sums `softmax_rows` takes together.
const SIDE_BY_SIDE: usize = 8;

/// `x[j] = exp(x[j] - max)`, 16, then 8 values at a time where the CPU allows (every path the
/// same operations lane for lane).
fn exp_shifted(x: &mut [f32], max: f32) {
    let mut j = 0;
    if simd::available_512() {
        // SAFETY: `available_512()` checked.
        j = unsafe { softmax_simd::exp_row(x, max) };
    }
    if simd::available() {
        while let Some(chunk) = x.get_mut(j..j + 8) {
            // SAFETY: `available()` checked; `chunk` holds 8 values.
            unsafe { simd::exp8_shifted(chunk, max) };
            j += 8;
        }
    }
    x[j..].iter_mut().for_each(|v| *v = exp_nonpositive(*v - max));
}

/// The largest value (exact whatever the order, so taken in eight lanes).
fn max_of(x: &[f32]) -> f32 {
    let (chunks, tail) = x.as_chunks::<8>();
    let lanes = chunks.iter().fold([f32::NEG_INFINITY; 8], |m, c| std::array::from_fn(|l| m[l].max(c[l])));
    tail.iter().fold(lanes.into_iter().fold(f32::NEG_INFINITY, f32::max), |m, &v| m.max(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows side by side give each row the bits of the plain computation: exp in key order,
    /// the sum added in key order, then the normalization; the scalar chains too where the
    /// CPU takes the AVX-512 path.
    #[test]
    fn rows_side_by_side_match_the_plain_softmax() {
        for (rows, row_len) in [(1, 1), (3, 7), (9, 37), (14, 130), (17, 16), (16, 33), (14, 2177), (33, 15)] {
            let x: Vec<f32> = (0..rows * row_len).map(|i| ((i * 7919) % 1013) as f32 * 0.013 - 6.0).collect();
            let mut ours = x.clone();
            softmax_rows(&mut ours, row_len);
            let mut scalar = x.clone();
            for row in scalar.chunks_exact_mut(row_len) {
                exp_shifted(row, max_of(row));
            }
            normalize_side_by_side(&mut scalar, row_len);
            for (r, row) in x.chunks(row_len).enumerate() {
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = row.iter().map(|&v| exp_nonpositive(v - max)).collect();
                let mut sum = 0f32;
                for v in &e {
                    sum += v;
                }
                let want: Vec<u32> = e.iter().map(|v| (v * (1.0 / sum)).to_bits()).collect();
                let bits =
                    |v: &[f32]| v[r * row_len..(r + 1) * row_len].iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&ours), want, "{rows} rows of {row_len}, row {r}");
                assert_eq!(bits(&scalar), want, "{rows} rows of {row_len}, row {r}, scalar chains");
            }
        }
    }

    /// The vector exps agree bit for bit with the scalar one (which `entrobatch-math` checks
    /// against the exact value).
    #[test]
    fn vector_exps_agree_with_the_scalar_one() {
        let xs: Vec<f32> =
            (0..4000).map(|i| -(i as f32) * 0.0231 - 1e-3 * (i % 7) as f32).chain([0.0, -87.0, -200.0]).collect();
        let mut vector = xs.clone();
        if simd::available() {
            for chunk in vector.chunks_exact_mut(8) {
                // SAFETY: AVX2+FMA checked above; chunks of 8.
                unsafe { simd::exp8_shifted(chunk, 0.0) };
            }
        }
        let mut wide = xs.clone();
        if simd::available_512() {
            for chunk in wide.chunks_exact_mut(16) {
                // SAFETY: AVX-512F checked above; chunks of 16.
                unsafe { simd::exp16_shifted(chunk, 0.0) };
            }
        }
        for (i, &x) in xs.iter().enumerate() {
            let ours = exp_nonpositive(x);
            if simd::available_512() && i < xs.len() / 16 * 16 {
                assert_eq!(wide[i].to_bits(), ours.to_bits(), "x = {x} (16 lanes)");
            }
            if simd::available() && i < xs.len() / 8 * 8 {
                assert_eq!(vector[i].to_bits(), ours.to_bits(), "x = {x}");
            }
        }
    }
}
