//! x86 paths of `attention_f16`, over runs of keys in `F16Slots`' interleaved layout: a chunk's
//! value `d` of 16 keys is one F16C conversion (two of 8 on the 256-bit path), multiplied by
//! query value `d` of every head of the KV head (up to eight, 512-bit; one on the 256-bit path)
//! into each head's chain `d % 8`; the value sum widens a key's value row once for up to eight heads
//! (512-bit) or one (256-bit). The number of heads is a const parameter, so every accumulator
//! stays in a register.

use std::ops::Range;

use crate::attention_kernel::KvKernel;
use crate::attention_runs::{Geometry, KeyRun};
use crate::kv_f16::F16Slots;

/// `attention_f16::score_run` with `kernel`'s registers.
///
/// # Safety
///
/// `kernel` must be supported and not `Scalar`; `head_dim` a multiple of 32; the run's slots
/// exist in `run.src`, its keys in `scores`' rows, and `heads` in `q`.
pub(crate) unsafe fn score_run(
    kernel: KvKernel,
    g: &Geometry,
    q: &[f32],
    heads: Range<usize>,
    scale: f32,
    run: &KeyRun<'_, F16Slots>,
    scores: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    match kernel {
        KvKernel::Avx512Vnni => imp::score_run_zmm(g, q, heads, scale, run, scores),
        _ => imp::score_run_ymm(g, q, heads, scale, run, scores),
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (kernel, g, q, heads, scale, run, scores);
}

/// `attention_f16::value_run` with `kernel`'s registers.
///
/// # Safety
///
/// As `score_run`; `probs` holds the task's rows of `g.num_keys`, `out_heads` `heads.len()`
/// rows of `head_dim`.
pub(crate) unsafe fn value_run(
    kernel: KvKernel,
    g: &Geometry,
    probs: &[f32],
    heads: Range<usize>,
    run: &KeyRun<'_, F16Slots>,
    out_heads: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    match kernel {
        KvKernel::Avx512Vnni => imp::value_run_zmm(g, probs, heads, run, out_heads),
        _ => imp::value_run_ymm(g, probs, heads, run, out_heads),
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (kernel, g, probs, heads, run, out_heads);
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use crate::attention_runs::{chunks, heads_of, lane0, lane_mask, Geometry, KeyRun};
    use crate::kv_f16::F16Slots;
    use crate::kv_layout::SLOT_CHUNK;

    /// A score's fma chains: value `d` goes into chain `d % 8`, as lane `d % 8` of the f32
    /// cache's `dot` (`attention_f16`'s doc).
    const CHAINS: usize = 8;

    /// Calls `$f::<N, ...>` for `N` = `$n` (1 to 8), so that a kernel's accumulators for its
    /// `N` heads are registers.
    macro_rules! by_heads {
        ($n:expr, $f:ident, [$($c:expr),*], ($($arg:expr),*)) => {
            match $n {
                1 => $f::<1 $(, $c)*>($($arg),*),
                2 => $f::<2 $(, $c)*>($($arg),*),
                3 => $f::<3 $(, $c)*>($($arg),*),
                4 => $f::<4 $(, $c)*>($($arg),*),
                5 => $f::<5 $(, $c)*>($($arg),*),
                6 => $f::<6 $(, $c)*>($($arg),*),
                7 => $f::<7 $(, $c)*>($($arg),*),
                _ => $f::<8 $(, $c)*>($($arg),*),
            }
        };
    }

    /// # Safety
    ///
    /// See `super::score_run`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    pub(super) unsafe fn score_run_zmm(
        g: &Geometry,
        q: &[f32],
        heads: Range<usize>,
        scale: f32,
        run: &KeyRun<'_, F16Slots>,
        scores: &mut [f32],
    ) {
        for kv_head in heads.start / g.heads_per_kv..heads.end.div_ceil(g.heads_per_kv) {
            let kv_heads = heads_of(kv_head, &heads, g.heads_per_kv);
            if kv_heads.len() > 3 {
                for first in kv_heads.clone().step_by(8) {
                    let sub = first..(first + 8).min(kv_heads.end);
                    by_heads!(sub.len(), score_zmm_by_pairs, [], (g, q, kv_head, sub.start, scale, run, scores));
                }
            } else {
                by_heads!(kv_heads.len(), score_zmm, [], (g, q, kv_head, kv_heads.start, scale, run, scores));
            }
        }
    }

    /// Scores of heads `h1..h1 + HS` (4 to 8, all reading `kv_head`) over the run, the chains
    /// two at a time: chains 0 and 1 over all the head's values, added; then 2 and 3, added to
    /// that; and so on, which is the tree of the eight chains' sum, so each head needs four
    /// accumulators instead of eight and every head of the KV head shares a key's conversion.
    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    unsafe fn score_zmm_by_pairs<const HS: usize>(
        g: &Geometry,
        q: &[f32],
        kv_head: usize,
        h1: usize,
        scale: f32,
        run: &KeyRun<'_, F16Slots>,
        scores: &mut [f32],
    ) {
        let src = run.src;
        let q_of = |n: usize| q.as_ptr().add((h1 + n - g.h0) * g.head_dim);
        for (base, lanes) in chunks(run) {
            let kp = src.k.as_ptr().add(src.k_at(base, kv_head, 0)) as *const __m256i;
            // `first`: chains 0 + 1 (then 4 + 5); `half`: ((0 + 1) + (2 + 3)).
            let mut first = [_mm512_setzero_ps(); HS];
            let mut half = [_mm512_setzero_ps(); HS];
            let mut sum = [_mm512_setzero_ps(); HS];
            for pair in 0..CHAINS / 2 {
                let (la, lb) = (2 * pair, 2 * pair + 1);
                let mut a = [_mm512_setzero_ps(); HS];
                let mut b = [_mm512_setzero_ps(); HS];
                for d in (0..g.head_dim).step_by(CHAINS) {
                    let ka = _mm512_cvtph_ps(_mm256_loadu_si256(kp.add(d + la)));
                    let kb = _mm512_cvtph_ps(_mm256_loadu_si256(kp.add(d + lb)));
                    for n in 0..HS {
                        a[n] = _mm512_fmadd_ps(_mm512_set1_ps(*q_of(n).add(d + la)), ka, a[n]);
                        b[n] = _mm512_fmadd_ps(_mm512_set1_ps(*q_of(n).add(d + lb)), kb, b[n]);
                    }
                }
                for n in 0..HS {
                    let ab = _mm512_add_ps(a[n], b[n]);
                    match pair {
                        0 | 2 => first[n] = ab,
                        1 => half[n] = _mm512_add_ps(first[n], ab),
                        _ => sum[n] = _mm512_add_ps(half[n], _mm512_add_ps(first[n], ab)),
                    }
                }
            }
            for (n, &s) in sum.iter().enumerate() {
                put_scores(g, h1 + n, run, base, &lanes, _mm512_mul_ps(s, _mm512_set1_ps(scale)), scores);
            }
        }
    }

    /// Scores of heads `h1..h1 + HS` (at most 3, all reading `kv_head`) over the run: eight
    /// chains a head, 24 accumulators, all in flight at once (fewer heads than `score_zmm_by_pairs`
    /// needs to keep the fma units busy).
    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    unsafe fn score_zmm<const HS: usize>(
        g: &Geometry,
        q: &[f32],
        kv_head: usize,
        h1: usize,
        scale: f32,
        run: &KeyRun<'_, F16Slots>,
        scores: &mut [f32],
    ) {
        let src = run.src;
        let q_of = |n: usize| q.as_ptr().add((h1 + n - g.h0) * g.head_dim);
        for (base, lanes) in chunks(run) {
            let kp = src.k.as_ptr().add(src.k_at(base, kv_head, 0)) as *const __m256i;
            let mut s = [[_mm512_setzero_ps(); CHAINS]; HS];
            for d in (0..g.head_dim).step_by(CHAINS) {
                for l in 0..CHAINS {
                    let k = _mm512_cvtph_ps(_mm256_loadu_si256(kp.add(d + l)));
                    for (n, s) in s.iter_mut().enumerate() {
                        s[l] = _mm512_fmadd_ps(_mm512_set1_ps(*q_of(n).add(d + l)), k, s[l]);
                    }
                }
            }
            for (n, s) in s.iter().enumerate() {
                let sum = _mm512_add_ps(
                    _mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])),
                    _mm512_add_ps(_mm512_add_ps(s[4], s[5]), _mm512_add_ps(s[6], s[7])),
                );
                put_scores(g, h1 + n, run, base, &lanes, _mm512_mul_ps(sum, _mm512_set1_ps(scale)), scores);
            }
        }
    }

    /// Head `h`'s scores of the run's lanes `lanes` of the chunk at `base`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn put_scores(
        g: &Geometry,
        h: usize,
        run: &KeyRun<'_, F16Slots>,
        base: usize,
        lanes: &Range<usize>,
        values: __m512,
        scores: &mut [f32],
    ) {
        let row = &mut scores[(h - g.h0) * g.num_keys..][..g.num_keys];
        let at = lane0(row.as_ptr(), run, base) as *mut f32;
        // SAFETY: masked: only the run's lanes, all inside `row`, are written.
        unsafe { _mm512_mask_storeu_ps(at, lane_mask(lanes), values) };
    }

    /// # Safety
    ///
    /// See `super::score_run`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn score_run_ymm(
        g: &Geometry,
        q: &[f32],
        heads: Range<usize>,
        scale: f32,
        run: &KeyRun<'_, F16Slots>,
        scores: &mut [f32],
    ) {
        for h in heads {
            score_ymm(g, q, h / g.heads_per_kv, h, scale, run, scores);
        }
    }

    /// Scores of head `h` over the run, a chunk's two halves of 8 lanes one after the other:
    /// eight chains, eight accumulators.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn score_ymm(
        g: &Geometry,
        q: &[f32],
        kv_head: usize,
        h: usize,
        scale: f32,
        run: &KeyRun<'_, F16Slots>,
        scores: &mut [f32],
    ) {
        let src = run.src;
        let q = q.as_ptr().add((h - g.h0) * g.head_dim);
        for (base, lanes) in chunks(run) {
            let mut values = [0f32; SLOT_CHUNK];
            for half in 0..2 {
                if lanes.end <= 8 * half || lanes.start >= 8 * (half + 1) {
                    continue;
                }
                let kp = src.k.as_ptr().add(src.k_at(base, kv_head, 0) + 8 * half);
                let mut s = [_mm256_setzero_ps(); CHAINS];
                for d in (0..g.head_dim).step_by(CHAINS) {
                    for (l, s) in s.iter_mut().enumerate() {
                        let k = _mm256_cvtph_ps(_mm_loadu_si128(kp.add(SLOT_CHUNK * (d + l)) as *const __m128i));
                        *s = _mm256_fmadd_ps(_mm256_set1_ps(*q.add(d + l)), k, *s);
                    }
                }
                let sum = _mm256_add_ps(
                    _mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3])),
                    _mm256_add_ps(_mm256_add_ps(s[4], s[5]), _mm256_add_ps(s[6], s[7])),
                );
                _mm256_storeu_ps(values.as_mut_ptr().add(8 * half), _mm256_mul_ps(sum, _mm256_set1_ps(scale)));
            }
            let key = run.key + base + lanes.start - run.slot;
            let row = &mut scores[(h - g.h0) * g.num_keys..];
            row[key..key + lanes.len()].copy_from_slice(&values[lanes.clone()]);
        }
    }

    /// # Safety
    ///
    /// See `super::value_run`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    pub(super) unsafe fn value_run_zmm(
        g: &Geometry,
        probs: &[f32],
        heads: Range<usize>,
        run: &KeyRun<'_, F16Slots>,
        out_heads: &mut [f32],
    ) {
        for kv_head in heads.start / g.heads_per_kv..heads.end.div_ceil(g.heads_per_kv) {
            let kv_heads = heads_of(kv_head, &heads, g.heads_per_kv);
            for first in kv_heads.clone().step_by(8) {
                let sub = first..(first + 8).min(kv_heads.end);
                // Four heads over 64 values, or up to eight over 32, keep every accumulator and
                // the key's widened values in the 32 registers.
                if sub.len() <= 4 {
                    for d0 in (0..g.head_dim).step_by(64) {
                        if g.head_dim - d0 >= 64 {
                            by_heads!(sub.len(), values_zmm, [4], (g, probs, kv_head, sub.start, d0, run, out_heads));
                        } else {
                            by_heads!(sub.len(), values_zmm, [2], (g, probs, kv_head, sub.start, d0, run, out_heads));
                        }
                    }
                } else {
                    for d0 in (0..g.head_dim).step_by(32) {
                        by_heads!(sub.len(), values_zmm, [2], (g, probs, kv_head, sub.start, d0, run, out_heads));
                    }
                }
            }
        }
    }

    /// Values `d0..d0 + 16 * NV` of heads `h1..h1 + HS` (all reading `kv_head`), held in
    /// registers over the run.
    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    unsafe fn values_zmm<const HS: usize, const NV: usize>(
        g: &Geometry,
        probs: &[f32],
        kv_head: usize,
        h1: usize,
        d0: usize,
        run: &KeyRun<'_, F16Slots>,
        out_heads: &mut [f32],
    ) {
        let src = run.src;
        let out_at = |n: usize| (h1 + n - g.h0) * g.head_dim + d0;
        let p_at = |n: usize| probs.as_ptr().add((h1 + n - g.h0) * g.num_keys + run.key);
        let mut acc: [[__m512; NV]; HS] = std::array::from_fn(|n| {
            std::array::from_fn(|i| _mm512_loadu_ps(out_heads.as_ptr().add(out_at(n) + 16 * i)))
        });
        for i in 0..run.len {
            let vp = src.v.as_ptr().add(src.v_at(run.slot + i, kv_head, d0)) as *const __m256i;
            let v: [__m512; NV] = std::array::from_fn(|c| _mm512_cvtph_ps(_mm256_loadu_si256(vp.add(c))));
            for (n, acc) in acc.iter_mut().enumerate() {
                let p = _mm512_set1_ps(*p_at(n).add(i));
                for (a, &v) in acc.iter_mut().zip(&v) {
                    *a = _mm512_fmadd_ps(p, v, *a);
                }
            }
        }
        for (n, acc) in acc.iter().enumerate() {
            for (i, &a) in acc.iter().enumerate() {
                _mm512_storeu_ps(out_heads.as_mut_ptr().add(out_at(n) + 16 * i), a);
            }
        }
    }

    /// # Safety
    ///
    /// See `super::value_run`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn value_run_ymm(
        g: &Geometry,
        probs: &[f32],
        heads: Range<usize>,
        run: &KeyRun<'_, F16Slots>,
        out_heads: &mut [f32],
    ) {
        let src = run.src;
        for h in heads {
            let kv_head = h / g.heads_per_kv;
            let p = &probs[(h - g.h0) * g.num_keys + run.key..][..run.len];
            for d0 in (0..g.head_dim).step_by(32) {
                let out = out_heads.as_mut_ptr().add((h - g.h0) * g.head_dim + d0);
                let mut acc: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(out.add(8 * i)));
                for (i, &p) in p.iter().enumerate() {
                    let vp = src.v.as_ptr().add(src.v_at(run.slot + i, kv_head, d0)) as *const __m128i;
                    let p = _mm256_set1_ps(p);
                    for (c, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(p, _mm256_cvtph_ps(_mm_loadu_si128(vp.add(c))), *a);
                    }
                }
                for (i, &a) in acc.iter().enumerate() {
                    _mm256_storeu_ps(out.add(8 * i), a);
                }
            }
        }
    }
}
