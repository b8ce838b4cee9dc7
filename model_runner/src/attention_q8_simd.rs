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
//! Values: a key's value row is widened to f32 once and fused-multiply-added into the outputs
//! of up to four query heads (zmm; one head at a time on the ymm path), in key order.

use std::ops::Range;

use crate::attention_kernel::KvKernel;
use crate::attention_q8::Query;
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
        supports_avx2() && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vnni")
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

/// `attention_q8::value_run` with `kernel`'s instructions.
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
    run: &KeyRun<'_, Q8Slots>,
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

    use crate::attention_q8::Query;
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

    /// Query heads whose outputs one pass over the keys accumulates (zmm).
    const VALUE_HEADS: usize = 8;

    /// # Safety
    ///
    /// See `super::value_run`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    pub(super) unsafe fn value_run_zmm(
        g: &Geometry,
        probs: &[f32],
        heads: Range<usize>,
        run: &KeyRun<'_, Q8Slots>,
        out_heads: &mut [f32],
    ) {
        for kv_head in heads.start / g.heads_per_kv..heads.end.div_ceil(g.heads_per_kv) {
            let kv_heads = heads_of(kv_head, &heads, g.heads_per_kv);
            for first in kv_heads.clone().step_by(VALUE_HEADS) {
                let sub = first..(first + VALUE_HEADS).min(kv_heads.end);
                // Four heads over 64 values, or up to eight over 32, keep every accumulator
                // and the key's widened values in the 32 registers.
                let width = if sub.len() <= 4 { 64 } else { 32 };
                for d0 in (0..g.head_dim).step_by(width) {
                    let slice = Slice { kv_head, heads: sub.clone(), d0 };
                    match (sub.len(), g.head_dim - d0 >= 64 && width == 64) {
                        (1, true) => values_zmm::<1, 4>(g, probs, &slice, run, out_heads),
                        (2, true) => values_zmm::<2, 4>(g, probs, &slice, run, out_heads),
                        (3, true) => values_zmm::<3, 4>(g, probs, &slice, run, out_heads),
                        (4, true) => values_zmm::<4, 4>(g, probs, &slice, run, out_heads),
                        (1, false) => values_zmm::<1, 2>(g, probs, &slice, run, out_heads),
                        (2, false) => values_zmm::<2, 2>(g, probs, &slice, run, out_heads),
                        (3, false) => values_zmm::<3, 2>(g, probs, &slice, run, out_heads),
                        (4, false) => values_zmm::<4, 2>(g, probs, &slice, run, out_heads),
                        (5, _) => values_zmm::<5, 2>(g, probs, &slice, run, out_heads),
                        (6, _) => values_zmm::<6, 2>(g, probs, &slice, run, out_heads),
                        (7, _) => values_zmm::<7, 2>(g, probs, &slice, run, out_heads),
                        (_, _) => values_zmm::<8, 2>(g, probs, &slice, run, out_heads),
                    }
                }
            }
        }
    }

    /// Values `d0..d0 + 16 * NV` of the query heads `heads` (at most 8), all reading `kv_head`.
    struct Slice {
        kv_head: usize,
        heads: Range<usize>,
        d0: usize,
    }

    /// `HS` heads' outputs over `NV` registers of 16 values, held in registers over the run.
    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    unsafe fn values_zmm<const HS: usize, const NV: usize>(
        g: &Geometry,
        probs: &[f32],
        slice: &Slice,
        run: &KeyRun<'_, Q8Slots>,
        out_heads: &mut [f32],
    ) {
        let (src, groups) = (run.src, g.head_dim / 32);
        let out_at = |n: usize| (slice.heads.start + n - g.h0) * g.head_dim + slice.d0;
        let mut acc: [[__m512; NV]; HS] = std::array::from_fn(|n| {
            std::array::from_fn(|i| _mm512_loadu_ps(out_heads.as_ptr().add(out_at(n) + 16 * i)))
        });
        for (base, lanes) in chunks(run) {
            // weights[n][c][t] = probability x value scale of lane t for head n and the
            // slice's group c.
            let mut weights = [[[0f32; SLOT_CHUNK]; 2]; HS];
            for (n, w) in weights.iter_mut().enumerate() {
                let row = &probs[(slice.heads.start + n - g.h0) * g.num_keys..][..g.num_keys];
                // Masked: only the run's lanes, all inside `row`, are read; the others are 0.
                let p = _mm512_maskz_loadu_ps(lane_mask(&lanes), lane0(row.as_ptr(), run, base));
                for (c, w) in w.iter_mut().enumerate().take(NV / 2) {
                    let at = src.scale_at(base, slice.kv_head * groups + slice.d0 / 32 + c);
                    let v_scales = _mm512_cvtph_ps(_mm256_loadu_si256(src.v_scales.as_ptr().add(at) as *const __m256i));
                    _mm512_storeu_ps(w.as_mut_ptr(), _mm512_mul_ps(p, v_scales));
                }
            }
            for t in lanes {
                let vp = src.v.as_ptr().add(src.v_at(base + t, slice.kv_head, slice.d0));
                let v: [__m512; NV] = std::array::from_fn(|i| {
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(vp.add(16 * i) as *const __m128i)))
                });
                for (n, acc) in acc.iter_mut().enumerate() {
                    for (i, a) in acc.iter_mut().enumerate() {
                        *a = _mm512_fmadd_ps(_mm512_set1_ps(weights[n][i / 2][t]), v[i], *a);
                    }
                }
            }
        }
        for (n, acc) in acc.iter().enumerate() {
            for (i, &a) in acc.iter().enumerate() {
                _mm512_storeu_ps(out_heads.as_mut_ptr().add(out_at(n) + 16 * i), a);
            }
        }
    }

    /// Eight int8 values at `p` as f32.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load8(p: *const i8) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i)))
    }

    /// # Safety
    ///
    /// See `super::value_run`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn value_run_ymm(
        g: &Geometry,
        probs: &[f32],
        heads: Range<usize>,
        run: &KeyRun<'_, Q8Slots>,
        out_heads: &mut [f32],
    ) {
        let (src, groups) = (run.src, g.head_dim / 32);
        for h in heads {
            let kv_head = h / g.heads_per_kv;
            let row = &probs[(h - g.h0) * g.num_keys..];
            for c in 0..groups {
                let out = out_heads.as_mut_ptr().add((h - g.h0) * g.head_dim + 32 * c);
                let mut acc: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(out.add(8 * i)));
                for i in 0..run.len {
                    let slot = run.slot + i;
                    let v_scale = src.v_scales[src.scale_at(slot, kv_head * groups + c)].to_f32();
                    let w = _mm256_set1_ps(row[run.key + i] * v_scale);
                    let vp = src.v.as_ptr().add(src.v_at(slot, kv_head, 32 * c));
                    for (j, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(w, load8(vp.add(8 * j)), *a);
                    }
                }
                for (j, &a) in acc.iter().enumerate() {
                    _mm256_storeu_ps(out.add(8 * j), a);
                }
            }
        }
    }
}
