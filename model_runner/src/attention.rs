use rayon::prelude::*;

use crate::batch::SeqSpan;
use crate::kv_cache::LayerKv;
use crate::metrics::{attention_metrics, AttnMetrics};

/// Shapes shared by every row of one layer's attention.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
}

/// The current step's rotated Q and K, and V, all `[rows, heads, head_dim]`.
pub struct StepQkv<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
}

/// Paged attention over a packed varlen batch. Keys before a span's `context_len` come from
/// the cache through its block table; the span's own rows come straight from this step's K/V,
/// so rows that are never persisted (slot -1) need no scratch slots. One rayon task per query
/// row; the query heads that share a KV head are scored together so each key row is loaded once.
///
/// Returns the attention output `[rows, heads, head_dim]` and, when `collect_metrics`, the
/// attention metrics of the last row of every span that asks for them.
pub fn paged_attention(
    shape: AttentionShape,
    qkv: &StepQkv<'_>,
    cache: &LayerKv,
    spans: &[SeqSpan],
    collect_metrics: bool,
) -> (Vec<f32>, Vec<Option<AttnMetrics>>) {
    let rows = qkv.q.len() / (shape.num_heads * shape.head_dim);
    let q_row_len = shape.num_heads * shape.head_dim;
    let mut row_span = vec![0usize; rows];
    for (s, span) in spans.iter().enumerate() {
        row_span[span.query_start..span.query_start + span.query_len].fill(s);
    }
    let mut out = vec![0f32; rows * q_row_len];
    let metrics: Vec<(usize, AttnMetrics)> = out
        .par_chunks_mut(q_row_len)
        .enumerate()
        .filter_map(|(row, out_row)| {
            let span = &spans[row_span[row]];
            let is_last = row + 1 == span.query_start + span.query_len;
            let want = collect_metrics && span.want_attn_metrics && is_last;
            attend_row(shape, qkv, cache, span, row, out_row, want).map(|m| (row_span[row], m))
        })
        .collect();
    let mut per_span = vec![None; spans.len()];
    for (s, m) in metrics {
        per_span[s] = Some(m);
    }
    (out, per_span)
}

fn attend_row(
    shape: AttentionShape,
    qkv: &StepQkv<'_>,
    cache: &LayerKv,
    span: &SeqSpan,
    row: usize,
    out_row: &mut [f32],
    want_metrics: bool,
) -> Option<AttnMetrics> {
    let AttentionShape { num_heads, num_kv_heads, head_dim, block_size } = shape;
    let group = num_heads / num_kv_heads;
    let kv_row_len = num_kv_heads * head_dim;
    let i = row - span.query_start;
    let num_keys = span.context_len + i + 1;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let q_row = &qkv.q[row * num_heads * head_dim..(row + 1) * num_heads * head_dim];

    // Where key j's K/V row starts: in the cache through the block table, or, for this step's
    // own rows, in the step's K/V (resolved once, not per head).
    let starts: Vec<(bool, usize)> = (0..num_keys)
        .map(|j| {
            if j < span.context_len {
                let slot = span.block_table[j / block_size] as usize * block_size + j % block_size;
                (false, slot * kv_row_len)
            } else {
                (true, (span.query_start + j - span.context_len) * kv_row_len)
            }
        })
        .collect();
    // scores[h * num_keys + j]
    let mut scores = vec![0f32; num_heads * num_keys];
    let key = |j: usize| -> &[f32] {
        let (new, off) = starts[j];
        let keys = if new { qkv.k } else { &cache.k[..] };
        &keys[off..off + kv_row_len]
    };
    let mut j0 = 0;
    if head_dim % 8 == 0 && simd::available() {
        while j0 + 8 <= num_keys {
            let rows: [&[f32]; 8] = std::array::from_fn(|j| key(j0 + j));
            for h in 0..num_heads {
                let g = h / group;
                let q = &q_row[h * head_dim..(h + 1) * head_dim];
                let out = &mut scores[h * num_keys + j0..h * num_keys + j0 + 8];
                // SAFETY: AVX2+FMA checked by `available()`; `q` and every key row hold
                // `(g + 1) * head_dim` values, `out` eight.
                unsafe { simd::dot8(q, &rows, g * head_dim, scale, out) };
            }
            j0 += 8;
        }
    }
    for j in j0..num_keys {
        let k_row = key(j);
        for h in 0..num_heads {
            let g = h / group;
            let k = &k_row[g * head_dim..(g + 1) * head_dim];
            scores[h * num_keys + j] = dot(&q_row[h * head_dim..(h + 1) * head_dim], k) * scale;
        }
    }
    let metrics = want_metrics.then(|| attention_metrics(&scores, num_heads, num_keys));
    for h in 0..num_heads {
        softmax_in_place(&mut scores[h * num_keys..(h + 1) * num_keys]);
    }
    for h in 0..num_heads {
        let g = h / group;
        let value = |j: usize| -> &[f32] {
            let (new, off) = starts[j];
            let values = if new { qkv.v } else { &cache.v[..] };
            &values[off + g * head_dim..off + (g + 1) * head_dim]
        };
        weighted_sum(&scores[h * num_keys..(h + 1) * num_keys], value, &mut out_row[h * head_dim..(h + 1) * head_dim]);
    }
    metrics
}

fn softmax_in_place(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut j = 0;
    if simd::available() {
        while let Some(chunk) = x.get_mut(j..j + 8) {
            // SAFETY: AVX2+FMA checked by `available()`; `chunk` holds 8 values.
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
const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
const EXP_POLY: [f32; 6] = [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5];
/// Below this exp(x) would leave f32's normal range; softmax weights that small are noise.
const EXP_MIN_ARG: f32 = -87.336_55;

/// `exp(x)` for `x <= 0` within about 2 ulp, as the same fma sequence `simd::exp8_shifted`
/// runs per lane (so a score's weight does not depend on which path computed it). libm's
/// `expf` per score was 4-7% of a 64-sequence decode step. Public so that tests can mirror
/// the kernel's arithmetic exactly.
#[inline]
pub fn exp_nonpositive(x: f32) -> f32 {
    let x = x.max(EXP_MIN_ARG);
    let n = x.mul_add(LOG2E, 0.5).floor();
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    let p = EXP_POLY[1..].iter().fold(EXP_POLY[0], |p, &c| p.mul_add(r, c));
    let y = p.mul_add(r * r, r) + 1.0;
    y * f32::from_bits(((n as i32 + 127) << 23) as u32)
}

/// Eight fused lane accumulators (lane `l` takes elements `8c + l`) summed as the pairwise
/// tree `simd::dot8` uses, so a key's score is the same whichever path computes it.
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (a8, a_tail) = a.as_chunks::<8>();
    let (b8, b_tail) = b.as_chunks::<8>();
    for (x, y) in a8.iter().zip(b8) {
        for l in 0..8 {
            acc[l] = x[l].mul_add(y[l], acc[l]);
        }
    }
    let mut sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (x, y) in a_tail.iter().zip(b_tail) {
        sum = x.mul_add(*y, sum);
    }
    sum
}

/// AVX2 paths: scores of 8 keys at once (their 8 lane accumulators are reduced together by
/// `hadd`s, which leaves one key's sum per lane instead of a horizontal sum per key), and the
/// softmax's exp 8 scores at a time.
mod simd {
    pub(super) fn available() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// `out[j] = dot(q, keys[j][at..at + q.len()]) * scale` with `dot`'s lanes and tree.
    /// Caller guarantees AVX2+FMA, `q.len() % 8 == 0`, `keys[j].len() >= at + q.len()`,
    /// `out.len() >= 8`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot8(q: &[f32], keys: &[&[f32]; 8], at: usize, scale: f32, out: &mut [f32]) {
        use std::arch::x86_64::*;
        let mut acc = [_mm256_setzero_ps(); 8];
        for c in (0..q.len()).step_by(8) {
            let qc = _mm256_loadu_ps(q.as_ptr().add(c));
            for j in 0..8 {
                acc[j] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(keys[j].as_ptr().add(at + c)), acc[j]);
            }
        }
        // hadd twice: lane j of the low (high) half of `u0`/`u1` holds key j's lanes 0..4
        // (4..8) summed as (0 + 1) + (2 + 3); adding the halves completes `dot`'s tree.
        let t0 = _mm256_hadd_ps(acc[0], acc[1]);
        let t1 = _mm256_hadd_ps(acc[2], acc[3]);
        let t2 = _mm256_hadd_ps(acc[4], acc[5]);
        let t3 = _mm256_hadd_ps(acc[6], acc[7]);
        let (u0, u1) = (_mm256_hadd_ps(t0, t1), _mm256_hadd_ps(t2, t3));
        let lo = _mm256_permute2f128_ps::<0x20>(u0, u1);
        let hi = _mm256_permute2f128_ps::<0x31>(u0, u1);
        let sums = _mm256_add_ps(lo, hi);
        _mm256_storeu_ps(out.as_mut_ptr(), _mm256_mul_ps(sums, _mm256_set1_ps(scale)));
    }

    /// `x[l] = exp_nonpositive(x[l] - max)` for the 8 values of `x`, lane for lane the same
    /// operations. Caller guarantees AVX2+FMA and `x.len() >= 8`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp8_shifted(x: &mut [f32], max: f32) {
        use super::{EXP_MIN_ARG, EXP_POLY, LN2_HI, LN2_LO, LOG2E};
        use std::arch::x86_64::*;
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

    #[cfg(not(target_arch = "x86_64"))]
    pub(super) unsafe fn exp8_shifted(_: &mut [f32], _: f32) {
        unreachable!("available() is false off x86_64")
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub(super) unsafe fn dot8(_: &[f32], _: &[&[f32]; 8], _: usize, _: f32, _: &mut [f32]) {
        unreachable!("available() is false off x86_64")
    }
}

/// `out = sum_j probs[j] * value(j)`. Each chunk of the output row stays in registers over
/// all keys (the widest chunk first: 64 floats are 8 independent fma chains), instead of
/// loading and storing the output row once per key.
fn weighted_sum<'a>(probs: &[f32], value: impl Fn(usize) -> &'a [f32], out: &mut [f32]) {
    let mut d0 = weighted_chunks::<64>(probs, &value, out, 0);
    d0 = weighted_chunks::<16>(probs, &value, out, d0);
    for d in d0..out.len() {
        out[d] = probs.iter().enumerate().fold(0.0, |acc, (j, &p)| p.mul_add(value(j)[d], acc));
    }
}

/// `weighted_sum` for the `W`-wide chunks of `out` from `d0` on; returns where it stopped.
fn weighted_chunks<'a, const W: usize>(
    probs: &[f32],
    value: &impl Fn(usize) -> &'a [f32],
    out: &mut [f32],
    mut d0: usize,
) -> usize {
    while d0 + W <= out.len() {
        let mut acc = [0f32; W];
        for (j, &p) in probs.iter().enumerate() {
            if let Some(v) = value(j)[d0..].first_chunk::<W>() {
                for d in 0..W {
                    acc[d] = p.mul_add(v[d], acc[d]);
                }
            }
        }
        out[d0..d0 + W].copy_from_slice(&acc);
        d0 += W;
    }
    d0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key's score is the same bits whether it falls in a block of 8 (the vector path) or
    /// in the tail (the scalar `dot`), so a row's scores do not depend on its key count.
    /// The vector and scalar exp agree bit for bit and stay within 2 ulp of libm's.
    #[test]
    fn exp_matches_libm_and_both_paths_agree() {
        let xs: Vec<f32> = (0..4000).map(|i| -(i as f32) * 0.0231 - 1e-3 * (i % 7) as f32).chain([0.0, -87.0, -200.0]).collect();
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

    #[test]
    fn blocked_scores_match_the_scalar_dot() {
        if !simd::available() {
            return;
        }
        let value = |i: usize| ((i * 2654435761) % 1999) as f32 / 999.5 - 1.0;
        let (head_dim, at) = (64, 64);
        let q: Vec<f32> = (0..head_dim).map(|i| value(i + 7)).collect();
        let keys: Vec<Vec<f32>> = (0..8).map(|j| (0..2 * head_dim).map(|i| value(1000 * j + i)).collect()).collect();
        let rows: [&[f32]; 8] = std::array::from_fn(|j| keys[j].as_slice());
        let mut out = [0f32; 8];
        // SAFETY: AVX2+FMA checked above; every key row holds `at + head_dim` values.
        unsafe { simd::dot8(&q, &rows, at, 0.125, &mut out) };
        for j in 0..8 {
            assert_eq!(out[j].to_bits(), (dot(&q, &keys[j][at..]) * 0.125).to_bits(), "key {j}");
        }
    }
}
