//! x86 paths of `attention_q8`, over runs of keys in `Q8Slots`' interleaved layout.
//!
//! Scores: a chunk's 16 slots hold four values of one KV head side by side, so one integer
//! instruction multiplies the query's four values (broadcast) with four values of each of 16
//! (zmm) or 8 (ymm) keys and leaves each key's partial dot product in its own lane. `vpdpbusd`
//! wants one unsigned operand: the keys are offset by 128 (`k ^ 0x80`, loaded once for every
//! query head of the KV head) and the accumulator starts at `-128 * sum(q)` of the group, so the
//! lane ends with the exact signed dot product. Without VNNI, `pmaddubsw` takes `|q|` and the
//! key with `q`'s sign (ggml's q8_0 trick; pair sums stay below 2 * 127 * 127, never saturating),
//! then `pmaddwd` adds pairs. Every path then does the scalar kernel's float operations.
//!
//! Values (`attention_q8_values`): two keys' value rows are widened to 16 bits and interleaved
//! once for up to eight query heads (zmm; one head at a time on the ymm path), whose int16
//! weights multiply both rows in one `vpdpwssd` (`pmaddwd` without VNNI).

use std::ops::Range;

use crate::attention_kernel::KvKernel;
use crate::attention_q8::Query;
use crate::attention_q8_values::{Layout, ValueSum};
use crate::attention_runs::{Geometry, KeyRun};
use crate::kv_q8::Q8Slots;

pub(crate) fn supports_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
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
        supports_avx2()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `attention_q8::score_run` with `kernel`'s instructions.
///
/// # Safety
///
/// `kernel` must be supported and not `Scalar`; groups are 32 values (`head_dim` a multiple of
/// 32); the run's slots exist in `run.src`, its keys in `scores`' rows, and `heads` in `query`.
pub(crate) unsafe fn score_run(
    kernel: KvKernel,
    g: &Geometry,
    query: &Query,
    heads: Range<usize>,
    scale: f32,
    run: &KeyRun<'_, Q8Slots>,
    scores: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    match kernel {
        KvKernel::Avx2 => imp::score_run_avx2(g, query, heads, scale, run, scores),
        KvKernel::AvxVnni => imp::score_run_avx_vnni(g, query, heads, scale, run, scores),
        KvKernel::Avx512Vnni => imp::score_run_zmm(g, query, heads, scale, run, scores),
        KvKernel::Scalar => unreachable!("the scalar kernel has no vector path"),
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (kernel, g, query, heads, scale, run, scores);
}

/// `attention_q8_values::value_run` with `kernel`'s instructions, into sums kept in the
/// kernel's `layout`.
///
/// # Safety
///
/// As `score_run`; `probs` holds the task's rows of `g.num_keys`, `values` the sums of
/// `heads.len()` heads and the gains of the row (`ValueSum::prepare`).
pub(crate) unsafe fn value_run(
    kernel: KvKernel,
    g: &Geometry,
    probs: &[f32],
    heads: Range<usize>,
    run: &KeyRun<'_, Q8Slots>,
    values: &mut ValueSum,
) {
    #[cfg(target_arch = "x86_64")]
    match kernel {
        KvKernel::Avx512Vnni => imp::value_run_zmm(g, probs, heads, run, values),
        KvKernel::AvxVnni => imp::value_run_avx_vnni(g, probs, heads, run, values),
        _ => imp::value_run_avx2(g, probs, heads, run, values),
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (kernel, g, probs, heads, run, values);
}

/// Where `kernel`'s value sums keep each value (`attention_q8_values::Layout`).
pub(crate) fn layout(kernel: KvKernel) -> Layout {
    match kernel {
        KvKernel::Scalar => Layout::InOrder,
        KvKernel::Avx512Vnni => Layout::Pairs(32),
        KvKernel::Avx2 | KvKernel::AvxVnni => Layout::Pairs(16),
    }
}

/// `ValueSum::flush` of `kernel`'s sums.
///
/// # Safety
///
/// As `value_run`; `out_heads` holds the heads' `head_dim` outputs.
pub(crate) unsafe fn flush(kernel: KvKernel, g: &Geometry, values: &mut ValueSum, out_heads: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if kernel == KvKernel::Avx512Vnni {
        return imp::flush_zmm(g, values, out_heads);
    }
    values.flush(g, layout(kernel), out_heads);
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use crate::attention_q8::Query;
    use crate::attention_q8_values::ValueSum;
    use crate::attention_runs::{chunks, heads_of, lane0, lane_mask, Geometry, KeyRun};
    use crate::kv_layout::SLOT_CHUNK;
    use crate::kv_q8::Q8Slots;

    /// Query heads scored together over one chunk of keys.
    const SCORE_HEADS: usize = 8;

    /// Four int8 query values as one broadcast i32.
    #[inline(always)]
    unsafe fn quad(q: &[i8], at: usize) -> i32 {
        std::ptr::read_unaligned(q.as_ptr().add(at) as *const i32)
    }

    /// Lanes `lanes` of `values` (lane `t` is the key `base - run.slot + t` of the run) into
    /// `row` of scores.
    #[inline(always)]
    fn put(values: &[f32; SLOT_CHUNK], lanes: &Range<usize>, run: &KeyRun<'_, Q8Slots>, base: usize, row: &mut [f32]) {
        let key = run.key + base + lanes.start - run.slot;
        row[key..key + lanes.len()].copy_from_slice(&values[lanes.clone()]);
    }

    /// # Safety
    ///
    /// See `super::score_run`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vnni")]
    pub(super) unsafe fn score_run_zmm(
        g: &Geometry,
        query: &Query,
        heads: Range<usize>,
        scale: f32,
        run: &KeyRun<'_, Q8Slots>,
        scores: &mut [f32],
    ) {
        let (src, groups) = (run.src, g.head_dim / 32);
        let offset = _mm512_set1_epi8(-128);
        for (base, lanes) in chunks(run) {
            for kv_head in heads.start / g.heads_per_kv..heads.end.div_ceil(g.heads_per_kv) {
                let kv_heads = heads_of(kv_head, &heads, g.heads_per_kv);
                for first in kv_heads.clone().step_by(SCORE_HEADS) {
                    let sub = first..(first + SCORE_HEADS).min(kv_heads.end);
                    let mut s: [__m512; SCORE_HEADS] = std::array::from_fn(|n| {
                        _mm512_set1_ps(query.base.get(first + n - g.h0).copied().unwrap_or(0.0))
                    });
                    for c in 0..groups {
                        let kp = src.k.as_ptr().add(src.k_at(base, kv_head, 32 * c));
                        let k: [__m512i; 8] = std::array::from_fn(|i| {
                            _mm512_xor_si512(_mm512_loadu_si512(kp.add(64 * i) as *const _), offset)
                        });
                        let sp = src.k_scales.as_ptr().add(src.scale_at(base, kv_head * groups + c));
                        let k_scales = _mm512_cvtph_ps(_mm256_loadu_si256(sp as *const __m256i));
                        for (n, h) in sub.clone().enumerate() {
                            let qg = (h - g.h0) * groups + c;
                            let q_at = (h - g.h0) * g.head_dim + 32 * c;
                            let mut acc = _mm512_set1_epi32(-128 * query.sums[qg]);
                            for (i, &k) in k.iter().enumerate() {
                                acc = _mm512_dpbusd_epi32(acc, k, _mm512_set1_epi32(quad(&query.q8, q_at + 4 * i)));
                            }
                            let w = _mm512_mul_ps(_mm512_set1_ps(query.scales[qg]), k_scales);
                            s[n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), w, s[n]);
                        }
                    }
                    for (n, h) in sub.enumerate() {
                        let row = &mut scores[(h - g.h0) * g.num_keys..][..g.num_keys];
                        let at = lane0(row.as_ptr(), run, base) as *mut f32;
                        // Masked: only the run's lanes, all inside `row`, are written.
                        _mm512_mask_storeu_ps(at, lane_mask(&lanes), _mm512_mul_ps(s[n], _mm512_set1_ps(scale)));
                    }
                }
            }
        }
    }

    /// `|q| x (k with q's sign)` added to `acc`, four products a lane (exact: see the module doc).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn dot_avx2(acc: __m256i, k: __m256i, q: __m256i) -> __m256i {
        let pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(k, q));
        _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }

    /// `(k + 128) x q` added to `acc` (the caller starts it at `-128 * sum(q)`).
    #[inline]
    #[target_feature(enable = "avx2,avxvnni")]
    fn dot_avx_vnni(acc: __m256i, k: __m256i, q: __m256i) -> __m256i {
        _mm256_dpbusd_avx_epi32(acc, _mm256_xor_si256(k, _mm256_set1_epi8(-128)), q)
    }

    macro_rules! score_run_ymm {
        ($name:ident, $features:literal, $dot:ident, $offset:literal) => {
            /// # Safety
            ///
            /// See `super::score_run`.
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $name(
                g: &Geometry,
                query: &Query,
                heads: Range<usize>,
                scale: f32,
                run: &KeyRun<'_, Q8Slots>,
                scores: &mut [f32],
            ) {
                let (src, groups) = (run.src, g.head_dim / 32);
                for (base, lanes) in chunks(run) {
                    for kv_head in heads.start / g.heads_per_kv..heads.end.div_ceil(g.heads_per_kv) {
                        for h in heads_of(kv_head, &heads, g.heads_per_kv) {
                            let mut values = [0f32; SLOT_CHUNK];
                            // The chunk's two halves of 8 lanes: bytes 32.. of each 64-byte row.
                            for half in 0..2 {
                                if lanes.end <= 8 * half || lanes.start >= 8 * (half + 1) {
                                    continue;
                                }
                                let mut s = _mm256_set1_ps(query.base[h - g.h0]);
                                for c in 0..groups {
                                    let kp = src.k.as_ptr().add(src.k_at(base, kv_head, 32 * c) + 32 * half);
                                    let sp =
                                        src.k_scales.as_ptr().add(src.scale_at(base, kv_head * groups + c) + 8 * half);
                                    let k_scales = _mm256_cvtph_ps(_mm_loadu_si128(sp as *const __m128i));
                                    let qg = (h - g.h0) * groups + c;
                                    let q_at = (h - g.h0) * g.head_dim + 32 * c;
                                    let mut acc = _mm256_set1_epi32(-$offset * query.sums[qg]);
                                    for i in 0..8 {
                                        let k = _mm256_loadu_si256(kp.add(64 * i) as *const __m256i);
                                        acc = $dot(acc, k, _mm256_set1_epi32(quad(&query.q8, q_at + 4 * i)));
                                    }
                                    let w = _mm256_mul_ps(_mm256_set1_ps(query.scales[qg]), k_scales);
                                    s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), w, s);
                                }
                                _mm256_storeu_ps(
                                    values.as_mut_ptr().add(8 * half),
                                    _mm256_mul_ps(s, _mm256_set1_ps(scale)),
                                );
                            }
                            put(&values, &lanes, run, base, &mut scores[(h - g.h0) * g.num_keys..]);
                        }
                    }
                }
            }
        };
    }

    score_run_ymm!(score_run_avx2, "avx2,fma,f16c", dot_avx2, 0);
    score_run_ymm!(score_run_avx_vnni, "avx2,fma,f16c,avxvnni", dot_avx_vnni, 128);

    /// Query heads whose sums one pass over the keys carries in registers (zmm).
    const VALUE_HEADS: usize = 8;

    /// # Safety
    ///
    /// See `super::value_run`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn value_run_zmm(
        g: &Geometry,
        probs: &[f32],
        heads: Range<usize>,
        run: &KeyRun<'_, Q8Slots>,
        values: &mut ValueSum,
    ) {
        for kv_head in heads.start / g.heads_per_kv..heads.end.div_ceil(g.heads_per_kv) {
            let kv_heads = heads_of(kv_head, &heads, g.heads_per_kv);
            for first in kv_heads.clone().step_by(VALUE_HEADS) {
                for c in 0..g.head_dim / 32 {
                    let slice = Slice { kv_head, heads: first..(first + VALUE_HEADS).min(kv_heads.end), c };
                    match slice.heads.len() {
                        1 => values_zmm::<1>(g, probs, &slice, run, values),
                        2 => values_zmm::<2>(g, probs, &slice, run, values),
                        3 => values_zmm::<3>(g, probs, &slice, run, values),
                        4 => values_zmm::<4>(g, probs, &slice, run, values),
                        5 => values_zmm::<5>(g, probs, &slice, run, values),
                        6 => values_zmm::<6>(g, probs, &slice, run, values),
                        7 => values_zmm::<7>(g, probs, &slice, run, values),
                        _ => values_zmm::<8>(g, probs, &slice, run, values),
                    }
                }
            }
        }
    }

    /// Group `c` of the query heads `heads` (at most 8), all reading `kv_head`.
    struct Slice {
        kv_head: usize,
        heads: Range<usize>,
        c: usize,
    }

    /// The int16 weights of a chunk's 16 lanes for group `c` of head `h` (0 outside `lanes`).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
    unsafe fn weights_zmm(
        g: &Geometry,
        probs: &[f32],
        (h, c): (usize, usize),
        v_scales: __m512,
        gains: &[f32],
        run: &KeyRun<'_, Q8Slots>,
        (base, lanes): (usize, &Range<usize>),
    ) -> __m256i {
        let row = &probs[(h - g.h0) * g.num_keys..][..g.num_keys];
        // Masked: only the run's lanes, all inside `row`, are read; the others are 0.
        let p = _mm512_maskz_loadu_ps(lane_mask(lanes), lane0(row.as_ptr(), run, base));
        let r = _mm512_mul_ps(v_scales, _mm512_set1_ps(gains[(h - g.h0) * (g.head_dim / 32) + c]));
        _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(p, r)))
    }

    /// `HS` heads' sums of one group, two keys at a time: the keys' 32 values widened to 16
    /// bits and interleaved in pairs (`Layout::Pairs(32)`), so that `vpdpwssd` multiplies each
    /// pair by the two keys' weights and adds both products to the value's sum.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
    unsafe fn values_zmm<const HS: usize>(
        g: &Geometry,
        probs: &[f32],
        slice: &Slice,
        run: &KeyRun<'_, Q8Slots>,
        values: &mut ValueSum,
    ) {
        let (src, groups) = (run.src, g.head_dim / 32);
        let at = |n: usize| (slice.heads.start + n - g.h0) * g.head_dim + 32 * slice.c;
        let mut sums: [[__m512i; 2]; HS] = std::array::from_fn(|n| {
            std::array::from_fn(|i| _mm512_loadu_si512(values.sums.as_ptr().add(at(n) + 16 * i) as *const _))
        });
        for (base, lanes) in chunks(run) {
            let sp = src.v_scales.as_ptr().add(src.scale_at(base, slice.kv_head * groups + slice.c));
            let v_scales = _mm512_cvtph_ps(_mm256_loadu_si256(sp as *const __m256i));
            let mut weights = [[0i16; SLOT_CHUNK]; HS];
            for (n, w) in weights.iter_mut().enumerate() {
                let head = (slice.heads.start + n, slice.c);
                let q = weights_zmm(g, probs, head, v_scales, &values.gains, run, (base, &lanes));
                _mm256_storeu_si256(w.as_mut_ptr() as *mut __m256i, q);
            }
            // Pairs from an even lane: a lane outside the run has weight 0, and every slot of a
            // chunk exists.
            for t in (lanes.start & !1..lanes.end.next_multiple_of(2)).step_by(2) {
                let vp = src.v.as_ptr().add(src.v_at(base + t, slice.kv_head, 32 * slice.c));
                let a = _mm512_cvtepi8_epi16(_mm256_loadu_si256(vp as *const __m256i));
                let b = _mm512_cvtepi8_epi16(_mm256_loadu_si256(vp.add(src.row_len) as *const __m256i));
                let (low, high) = (_mm512_unpacklo_epi16(a, b), _mm512_unpackhi_epi16(a, b));
                for (s, w) in sums.iter_mut().zip(&weights) {
                    let pair = _mm512_set1_epi32(std::ptr::read_unaligned(w.as_ptr().add(t) as *const i32));
                    s[0] = _mm512_dpwssd_epi32(s[0], low, pair);
                    s[1] = _mm512_dpwssd_epi32(s[1], high, pair);
                }
            }
        }
        for (n, s) in sums.iter().enumerate() {
            for (i, &s) in s.iter().enumerate() {
                _mm512_storeu_si512(values.sums.as_mut_ptr().add(at(n) + 16 * i) as *mut _, s);
            }
        }
    }

    /// `ValueSum::flush` of `Layout::Pairs(32)` sums, 16 values a register.
    ///
    /// # Safety
    ///
    /// See `super::flush`; `head_dim` is a multiple of 32.
    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    pub(super) unsafe fn flush_zmm(g: &Geometry, values: &mut ValueSum, out_heads: &mut [f32]) {
        let groups = g.head_dim / 32;
        // Value d of a block: lane 4L + d % 8 of its first half (d % 8 < 4) or second half.
        let order: [_; 2] = std::array::from_fn(|i| {
            let index: [i32; 16] = std::array::from_fn(|j| {
                let d = 16 * i + j;
                let lane = 4 * (d / 8) + d % 4;
                (if d % 8 < 4 { lane } else { 16 + lane }) as i32
            });
            _mm512_loadu_si512(index.as_ptr() as *const _)
        });
        for n in 0..values.sums.len() / g.head_dim {
            for c in 0..groups {
                let at = n * g.head_dim + 32 * c;
                let sp = values.sums.as_mut_ptr().add(at);
                let (low, high) = (_mm512_loadu_si512(sp as *const _), _mm512_loadu_si512(sp.add(16) as *const _));
                let step = _mm512_set1_ps(values.step(n, c, groups));
                for (i, &order) in order.iter().enumerate() {
                    let sums = _mm512_cvtepi32_ps(_mm512_permutex2var_epi32(low, order, high));
                    let out = out_heads.as_mut_ptr().add(at + 16 * i);
                    _mm512_storeu_ps(out, _mm512_fmadd_ps(sums, step, _mm512_loadu_ps(out)));
                }
                _mm512_storeu_si512(sp as *mut _, _mm512_setzero_si512());
                _mm512_storeu_si512(sp.add(16) as *mut _, _mm512_setzero_si512());
            }
        }
    }

    /// `pairs x weights` added to `sums`, two products a lane.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn pair_dot_avx2(sums: __m256i, pairs: __m256i, weights: __m256i) -> __m256i {
        _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, weights))
    }

    #[inline]
    #[target_feature(enable = "avx2,avxvnni")]
    fn pair_dot_avx_vnni(sums: __m256i, pairs: __m256i, weights: __m256i) -> __m256i {
        _mm256_dpwssd_avx_epi32(sums, pairs, weights)
    }

    macro_rules! value_run_ymm {
        ($name:ident, $features:literal, $dot:ident) => {
            /// One head and group at a time, 16 values a block (`Layout::Pairs(16)`).
            ///
            /// # Safety
            ///
            /// See `super::value_run`.
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $name(
                g: &Geometry,
                probs: &[f32],
                heads: Range<usize>,
                run: &KeyRun<'_, Q8Slots>,
                values: &mut ValueSum,
            ) {
                let (src, groups) = (run.src, g.head_dim / 32);
                for h in heads {
                    let (kv_head, row) = (h / g.heads_per_kv, &probs[(h - g.h0) * g.num_keys..][..g.num_keys]);
                    for c in 0..groups {
                        let gain = _mm256_set1_ps(values.gains[(h - g.h0) * groups + c]);
                        let sp = values.sums.as_mut_ptr().add((h - g.h0) * g.head_dim + 32 * c);
                        let mut sums: [__m256i; 4] =
                            std::array::from_fn(|i| _mm256_loadu_si256(sp.add(8 * i) as *const __m256i));
                        for (base, lanes) in chunks(run) {
                            let mut p = [0f32; SLOT_CHUNK];
                            let key = run.key + base + lanes.start - run.slot;
                            p[lanes.clone()].copy_from_slice(&row[key..key + lanes.len()]);
                            let mut q = [0i32; SLOT_CHUNK];
                            for half in 0..2 {
                                let at = src.scale_at(base, kv_head * groups + c) + 8 * half;
                                let scales =
                                    _mm256_cvtph_ps(_mm_loadu_si128(src.v_scales.as_ptr().add(at) as *const _));
                                let w = _mm256_mul_ps(
                                    _mm256_loadu_ps(p.as_ptr().add(8 * half)),
                                    _mm256_mul_ps(scales, gain),
                                );
                                _mm256_storeu_si256(
                                    q.as_mut_ptr().add(8 * half) as *mut __m256i,
                                    _mm256_cvtps_epi32(w),
                                );
                            }
                            let weights: [i16; SLOT_CHUNK] =
                                q.map(|q| q.clamp(i16::MIN as i32, i16::MAX as i32) as i16);
                            for t in (lanes.start & !1..lanes.end.next_multiple_of(2)).step_by(2) {
                                let vp = src.v.as_ptr().add(src.v_at(base + t, kv_head, 32 * c));
                                let pair =
                                    _mm256_set1_epi32(std::ptr::read_unaligned(weights.as_ptr().add(t) as *const i32));
                                for block in 0..2 {
                                    let a = _mm256_cvtepi8_epi16(_mm_loadu_si128(vp.add(16 * block) as *const _));
                                    let b = _mm256_cvtepi8_epi16(_mm_loadu_si128(
                                        vp.add(src.row_len + 16 * block) as *const _
                                    ));
                                    sums[2 * block] = $dot(sums[2 * block], _mm256_unpacklo_epi16(a, b), pair);
                                    sums[2 * block + 1] = $dot(sums[2 * block + 1], _mm256_unpackhi_epi16(a, b), pair);
                                }
                            }
                        }
                        for (i, &s) in sums.iter().enumerate() {
                            _mm256_storeu_si256(sp.add(8 * i) as *mut __m256i, s);
                        }
                    }
                }
            }
        };
    }

    value_run_ymm!(value_run_avx2, "avx2,fma,f16c", pair_dot_avx2);
    value_run_ymm!(value_run_avx_vnni, "avx2,fma,f16c,avxvnni", pair_dot_avx_vnni);
}
