//! The 512-bit VNNI kernel: two 8-column panels of one weight in one zmm register, so each
//! activation broadcast, each `vpdpbusd` and each epilogue instruction serves 16 columns. On a
//! CPU with a full-width 512-bit datapath (Zen 5, Intel server cores) that is twice the work
//! per instruction of `kernel_vnni.rs`'s ymm tile.
//!
//! The panels keep their 8-column layout (`pack.rs`): a group's weights are the two panels'
//! 32-byte vectors joined into one register, the low half the first panel's columns. Lane for
//! lane, the operations are those of the ymm kernels (the block's exact integer dot product,
//! then `simd_tile.rs`'s convert, scale multiply and fmas in block order), so the outputs are
//! bit-identical to theirs and to `kernel_scalar.rs`. The signed kind runs its weights biased
//! by 128 as unsigned bytes, from sums that start at -128 x the activations' block sum.
//!
//! A pair reads six streams (quants, scales and mins of two panels) where one panel reads
//! three, and with two threads that was more than the hardware prefetcher followed: a weight
//! streamed from DRAM (an lm_head) ran slower than the ymm kernel at 1 to 8 rows. The first
//! row tile of a pair therefore prefetches `PREFETCH_BLOCKS` blocks ahead in all six, which
//! brought those cases to parity (bench/benches/int8_kernels.rs; docs/benchmarks/notebook.md,
//! "2026-11-26 01:06 UTC").

use super::activation::QuantizedRows;
use super::kernel_avx2;
use super::pack::{Mins, Panel};
use super::{kernel_scalar, PANEL};

/// Rows per tile: AVX-512's 32 registers hold 8 rows' f32 accumulators and integer sums
/// beside the weights, so each weight register loaded serves twice the rows of the 16-register
/// ymm kernels' 4 (12 rows gained nothing more; docs/benchmarks/notebook.md,
/// "2026-11-26 03:30-05:18 UTC").
const TILE_ROWS: usize = 8;

/// Whether this CPU can run the kernel (cached feature loads).
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        kernel_avx2::available()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
            // A weight's odd last panel takes the ymm VNNI kernel's EVEX encoding.
            && is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Panels `a` and `b` of one weight against rows `row0..row0 + rows`: `out_a` and `out_b`
/// get `rows` rows of `PANEL` each, as `kernel_scalar::tile` would write them for each panel
/// (which it falls back to without the features or with inconsistent bounds).
pub(crate) fn tile_pair(
    a: &Panel<'_>,
    b: &Panel<'_>,
    act: &QuantizedRows,
    row0: usize,
    rows: usize,
    out_a: &mut [f32],
    out_b: &mut [f32],
) {
    let fits = kernel_avx2::in_bounds(a, act, row0, rows, out_a)
        && kernel_avx2::in_bounds(b, act, row0, rows, out_b)
        && a.kind == b.kind
        && a.scales.width() == b.scales.width()
        && match (a.mins, b.mins) {
            (Mins::Absent, Mins::Absent) | (Mins::Stored(_), Mins::Stored(_)) => true,
            (Mins::OfScale(ka), Mins::OfScale(kb)) => ka.to_bits() == kb.to_bits(),
            _ => false,
        };
    if !fits || !available() {
        kernel_scalar::tile(a, act, row0, rows, out_a);
        kernel_scalar::tile(b, act, row0, rows, out_b);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let mut r = 0;
        while r < rows {
            let n = (rows - r).min(TILE_ROWS);
            let (oa, ob) = (&mut out_a[r * PANEL..(r + n) * PANEL], &mut out_b[r * PANEL..(r + n) * PANEL]);
            // SAFETY: `available()` confirmed the features, `in_bounds` held for both panels
            // (same kind, scale width and mins, hence same layout) over rows `row0 + r .. + n`. Only the tile
            // of the batch's first row prefetches: callers go through the rows in order, and
            // later tiles find the pair's weights in L1.
            unsafe { imp::tile_rows((a, b), act, row0 + r, n, oa, ob, row0 + r == 0) };
            r += n;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    use super::super::activation::QuantizedRows;
    use super::super::factors::sub_block_positions;
    use super::super::factors::Factors;
    use super::super::pack::{Mins, Panel, QuantKind, NIBBLE_BYTES};
    use super::super::simd_tile::{width_code, HALF, NIBBLE, SIGNED, SINGLE, SUB_BLOCK, UNSIGNED};
    use super::super::{BLOCK, PANEL};

    /// How far ahead the first row tile of a pair prefetches, in blocks of each panel (2 KiB
    /// of Q4_1 quants, 4 KiB of Q8_0). With a pair's panels in two streams (`matmul_many_into`)
    /// Qwen2.5's projections at batch 1 were fastest 16 to 32 blocks ahead, and 12 to 20 were
    /// alike end to end; 64, the best for neighbouring panels, was slower with two streams
    /// (bench/benches/int8_stream.rs; docs/benchmarks/notebook.md,
    /// "2026-11-27 05:24-06:09 UTC").
    const PREFETCH_BLOCKS: usize = 16;

    /// # Safety
    ///
    /// The module's features; `kernel_avx2::in_bounds` holds for both panels over rows
    /// `row0..row0 + n`, `n <= TILE_ROWS`, and both panels have the same kind and scale width.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn tile_rows(
        (a, b): (&Panel<'_>, &Panel<'_>),
        act: &QuantizedRows,
        row0: usize,
        n: usize,
        oa: &mut [f32],
        ob: &mut [f32],
        prefetch: bool,
    ) {
        let pair = (a, b);
        match (width_code(a.scales.width()), a.kind) {
            (HALF, QuantKind::Nibble) => tile_height::<HALF, NIBBLE>(pair, act, row0, n, oa, ob, prefetch),
            (HALF, QuantKind::Unsigned) => tile_height::<HALF, UNSIGNED>(pair, act, row0, n, oa, ob, prefetch),
            (HALF, QuantKind::Signed) => tile_height::<HALF, SIGNED>(pair, act, row0, n, oa, ob, prefetch),
            (SINGLE, QuantKind::Nibble) => tile_height::<SINGLE, NIBBLE>(pair, act, row0, n, oa, ob, prefetch),
            (SINGLE, QuantKind::Unsigned) => tile_height::<SINGLE, UNSIGNED>(pair, act, row0, n, oa, ob, prefetch),
            (SINGLE, QuantKind::Signed) => tile_height::<SINGLE, SIGNED>(pair, act, row0, n, oa, ob, prefetch),
            // Q4_K and Q5_K are packed with sub-block factors (`in_bounds` checks which kinds).
            (SUB_BLOCK, QuantKind::Unsigned) => {
                tile_height::<SUB_BLOCK, UNSIGNED>(pair, act, row0, n, oa, ob, prefetch)
            }
            _ => tile_height::<SUB_BLOCK, NIBBLE>(pair, act, row0, n, oa, ob, prefetch),
        }
    }

    /// `tile_rows` for one scale width and kind: `n` rows as a const.
    #[inline(always)]
    unsafe fn tile_height<const W: u8, const KIND: u8>(
        (a, b): (&Panel<'_>, &Panel<'_>),
        act: &QuantizedRows,
        row0: usize,
        n: usize,
        oa: &mut [f32],
        ob: &mut [f32],
        prefetch: bool,
    ) {
        match n {
            1 => tile_n::<W, 1, KIND>((a, b), act, row0, oa, ob, prefetch),
            2 => tile_n::<W, 2, KIND>((a, b), act, row0, oa, ob, prefetch),
            3 => tile_n::<W, 3, KIND>((a, b), act, row0, oa, ob, prefetch),
            4 => tile_n::<W, 4, KIND>((a, b), act, row0, oa, ob, prefetch),
            5 => tile_n::<W, 5, KIND>((a, b), act, row0, oa, ob, prefetch),
            6 => tile_n::<W, 6, KIND>((a, b), act, row0, oa, ob, prefetch),
            7 => tile_n::<W, 7, KIND>((a, b), act, row0, oa, ob, prefetch),
            _ => tile_n::<W, 8, KIND>((a, b), act, row0, oa, ob, prefetch),
        }
    }

    /// Group `g`'s 4 activations of the block at `x`, in all 16 lanes.
    #[inline(always)]
    unsafe fn group(x: *const i8, g: usize) -> __m512i {
        _mm512_set1_epi32(std::ptr::read_unaligned(x.add(4 * g) as *const i32))
    }

    /// The 32 bytes at `lo` and at `hi` as one register, `lo` in the low half.
    #[inline(always)]
    unsafe fn join_i(lo: *const u8, hi: *const u8) -> __m512i {
        let low = _mm512_castsi256_si512(_mm256_loadu_si256(lo as *const __m256i));
        _mm512_inserti64x4::<1>(low, _mm256_loadu_si256(hi as *const __m256i))
    }

    /// Two panels' factors (scales, or mins) as the addresses the loads start from, taken once
    /// a tile rather than matched on every block.
    #[derive(Clone, Copy)]
    struct PairFactors {
        lo: *const u8,
        hi: *const u8,
    }

    impl PairFactors {
        fn of(lo: Factors<'_>, hi: Factors<'_>) -> Self {
            Self { lo: lo.as_ptr(), hi: hi.as_ptr() }
        }
    }

    /// Values `i..i + 8` of the first panel's factors and of the second's as one f32 register,
    /// the first's in the low half (both of width `W`, `i` a multiple of `PANEL`).
    #[inline(always)]
    unsafe fn join_factors<const W: u8>(f: PairFactors, i: usize) -> __m512 {
        // 8 f16 values at `lo` and 8 at `hi`.
        let halves = |lo: *const u8, hi: *const u8| {
            let low = _mm256_castsi128_si256(_mm_loadu_si128(lo as *const __m128i));
            _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(low, _mm_loadu_si128(hi as *const __m128i)))
        };
        if W == HALF {
            halves(f.lo.add(2 * i), f.hi.add(2 * i))
        } else if W == SUB_BLOCK {
            let (super_at, sub_at) = sub_block_positions(i);
            let subs = |p: *const u8| std::ptr::read_unaligned(p.add(sub_at) as *const i64);
            let bytes = _mm_set_epi64x(subs(f.hi), subs(f.lo));
            let supers = halves(f.lo.add(super_at), f.hi.add(super_at));
            _mm512_mul_ps(supers, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes)))
        } else {
            let (lo, hi) = ((f.lo as *const f32).add(i), (f.hi as *const f32).add(i));
            let low = _mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(lo)));
            _mm512_castpd_ps(_mm512_insertf64x4::<1>(low, _mm256_castps_pd(_mm256_loadu_ps(hi))))
        }
    }

    /// # Safety
    ///
    /// As `tile_rows`, for `R` rows.
    // `r` selects the same row of `dots`, `acc` and the activations in lockstep.
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    unsafe fn tile_n<const W: u8, const R: usize, const KIND: u8>(
        (a, b): (&Panel<'_>, &Panel<'_>),
        act: &QuantizedRows,
        row0: usize,
        oa: &mut [f32],
        ob: &mut [f32],
        prefetch: bool,
    ) {
        let (k, nb) = (act.in_features, a.blocks);
        let block_bytes = a.kind.panel_block_bytes();
        let xq = act.quants.as_ptr().add(row0 * k);
        let xs = act.scales.as_ptr().add(row0 * nb);
        let sums = act.sums.as_ptr().add(row0 * nb);
        let offsets = act.bias_offsets.as_ptr().add(row0 * nb);
        let low_nibbles = _mm512_set1_epi8(0x0F);
        let mut acc = [_mm512_setzero_ps(); R];
        let scales = PairFactors::of(a.scales, b.scales);
        let stored_mins = match (a.mins, b.mins) {
            (Mins::Stored(ma), Mins::Stored(mb)) => Some(PairFactors::of(ma, mb)),
            _ => None,
        };
        for blk in 0..nb {
            let wa = a.quants.as_ptr().add(blk * block_bytes);
            let wb = b.quants.as_ptr().add(blk * block_bytes);
            let x = |r: usize| xq.add(r * k + blk * BLOCK);
            // Addresses past the panels (near the weight's end) are never dereferenced:
            // `prefetch` does not fault, and `wrapping_add` forms them without UB.
            if prefetch {
                let ahead = PREFETCH_BLOCKS * block_bytes;
                for line in (0..block_bytes).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(wa.wrapping_add(ahead + line) as *const i8);
                    _mm_prefetch::<_MM_HINT_T0>(wb.wrapping_add(ahead + line) as *const i8);
                }
                // A `SubBlock` block's u8 factors; its super-block's f16s lead the same record,
                // at most one line earlier, and the hardware prefetcher follows the record stream.
                let i = (blk + PREFETCH_BLOCKS) * PANEL;
                let s = if W == HALF {
                    2 * i
                } else if W == SINGLE {
                    4 * i
                } else {
                    sub_block_positions(i).1
                };
                _mm_prefetch::<_MM_HINT_T0>(scales.lo.wrapping_add(s) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(scales.hi.wrapping_add(s) as *const i8);
                if let Some(mins) = stored_mins {
                    _mm_prefetch::<_MM_HINT_T0>(mins.lo.wrapping_add(s) as *const i8);
                    _mm_prefetch::<_MM_HINT_T0>(mins.hi.wrapping_add(s) as *const i8);
                }
            }
            // The block's factors before its dot products, so that unpacking them (Q4_K's
            // sub-block factors take a few registers) never competes with `R` rows of sums.
            let dw = join_factors::<W>(scales, blk * PANEL);
            let dm = match (stored_mins, a.mins) {
                (Some(mins), _) => join_factors::<W>(mins, blk * PANEL),
                (None, Mins::OfScale(k)) => _mm512_mul_ps(dw, _mm512_set1_ps(k)),
                (None, _) => _mm512_setzero_ps(),
            };
            let mut dots = [_mm512_setzero_si512(); R];
            if KIND == SIGNED {
                // The weights run biased by 128 (below): the sums start from the `-128 *
                // sum(x)` that takes the bias off again, a broadcast load rather than arithmetic.
                for r in 0..R {
                    dots[r] = _mm512_set1_epi32(*offsets.add(r * nb + blk));
                }
            }
            if KIND == NIBBLE {
                for h in 0..4 {
                    let pair = join_i(wa.add(h * BLOCK), wb.add(h * BLOCK));
                    let lo = _mm512_and_si512(pair, low_nibbles);
                    let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(pair), low_nibbles);
                    for r in 0..R {
                        dots[r] = _mm512_dpbusd_epi32(dots[r], lo, group(x(r), h));
                        dots[r] = _mm512_dpbusd_epi32(dots[r], hi, group(x(r), h + 4));
                    }
                }
            } else if KIND == UNSIGNED {
                // `Nibble`'s unpacking, then 16 added to the bytes whose fifth bit is set: the
                // two panels' plane words for the group make one 64-bit byte mask.
                let sixteen = _mm512_set1_epi8(16);
                let fifth = |g: usize| {
                    let word = |w: *const u8| std::ptr::read_unaligned(w.add(NIBBLE_BYTES + 4 * g) as *const u32);
                    word(wa) as u64 | (word(wb) as u64) << 32
                };
                for h in 0..4 {
                    let pair = join_i(wa.add(h * BLOCK), wb.add(h * BLOCK));
                    let lo = _mm512_and_si512(pair, low_nibbles);
                    let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(pair), low_nibbles);
                    let lo = _mm512_mask_add_epi8(lo, fifth(h), lo, sixteen);
                    let hi = _mm512_mask_add_epi8(hi, fifth(h + 4), hi, sixteen);
                    for r in 0..R {
                        dots[r] = _mm512_dpbusd_epi32(dots[r], lo, group(x(r), h));
                        dots[r] = _mm512_dpbusd_epi32(dots[r], hi, group(x(r), h + 4));
                    }
                }
            } else if KIND == SIGNED {
                // `vpdpbusd` takes u8 x i8: w + 128 (w with its sign bit flipped) as u8: the
                // same integer as the signed product, one instruction per row and group
                // instead of two.
                let bias = _mm512_set1_epi8(i8::MIN);
                for g in 0..8 {
                    let wu = _mm512_xor_si512(join_i(wa.add(g * BLOCK), wb.add(g * BLOCK)), bias);
                    for r in 0..R {
                        dots[r] = _mm512_dpbusd_epi32(dots[r], wu, group(x(r), g));
                    }
                }
            }
            for r in 0..R {
                let scale = _mm512_mul_ps(dw, _mm512_set1_ps(*xs.add(r * nb + blk)));
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots[r]), scale, acc[r]);
            }
            if KIND != SIGNED {
                for r in 0..R {
                    acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(*sums.add(r * nb + blk)), dm, acc[r]);
                }
            }
        }
        for r in 0..R {
            _mm256_storeu_ps(oa.as_mut_ptr().add(r * PANEL), _mm512_castps512_ps256(acc[r]));
            let high = _mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc[r]));
            _mm256_storeu_ps(ob.as_mut_ptr().add(r * PANEL), _mm256_castpd_ps(high));
        }
    }
}

#[cfg(test)]
mod tests {
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    use super::*;
    use crate::int8_gemm::{full_range_signed, quantize_rows, xorshift_values, PackedWeight};

    /// Every pair of adjacent panels against the scalar kernel, bit for bit, on every packed
    /// kind and tile height (9 rows: a full tile and a remainder).
    #[test]
    fn each_panel_pair_matches_the_scalar_kernel() {
        if !available() {
            eprintln!("no AVX-512 VNNI+BW here: the 512-bit kernel is not tested");
            return;
        }
        let (n, k) = (32, 512);
        let mut values = xorshift_values(0x9e37_79b9_7f4a_7c15);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        // Q4_K and Q5_K keep their sub-block factoring, the others have f16 scales; k = 512 is
        // two super-blocks, so a wrong super-block index shows.
        for dtype in
            [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q5_0, GgmlDType::Q8_0, GgmlDType::Q4K, GgmlDType::Q5K]
        {
            let w = Tensor::from_vec(values(n * k), (n, k), &Device::Cpu).unwrap();
            let packed = PackedWeight::from_qtensor(&QTensor::quantize(&w, dtype).unwrap()).unwrap().unwrap();
            for rows in 1..=9 {
                let act = quantize_rows(&values(rows * k), rows, k);
                for p in 0..packed.num_panels() - 1 {
                    let (a, b) = (packed.panel(p), packed.panel(p + 1));
                    let (mut fa, mut fb) = (vec![0.0f32; rows * PANEL], vec![0.0f32; rows * PANEL]);
                    let (mut sa, mut sb) = (vec![0.0f32; rows * PANEL], vec![0.0f32; rows * PANEL]);
                    tile_pair(&a, &b, &act, 0, rows, &mut fa, &mut fb);
                    kernel_scalar::tile(&a, &act, 0, rows, &mut sa);
                    kernel_scalar::tile(&b, &act, 0, rows, &mut sb);
                    assert_eq!(bits(&fa), bits(&sa), "{dtype:?} {rows} rows, panel {p}");
                    assert_eq!(bits(&fb), bits(&sb), "{dtype:?} {rows} rows, panel {}", p + 1);
                }
            }
        }
        let packed = full_range_signed(n, k);
        for rows in 1..=9 {
            let act = quantize_rows(&values(rows * k), rows, k);
            let (a, b) = (packed.panel(0), packed.panel(1));
            let (mut fa, mut fb) = (vec![0.0f32; rows * PANEL], vec![0.0f32; rows * PANEL]);
            let (mut sa, mut sb) = (vec![0.0f32; rows * PANEL], vec![0.0f32; rows * PANEL]);
            tile_pair(&a, &b, &act, 0, rows, &mut fa, &mut fb);
            kernel_scalar::tile(&a, &act, 0, rows, &mut sa);
            kernel_scalar::tile(&b, &act, 0, rows, &mut sb);
            assert_eq!((bits(&fa), bits(&fb)), (bits(&sa), bits(&sb)), "quants -128..=127, {rows} rows");
        }
    }
}
