//! The tile loop both SIMD kernels run: up to 4 rows x one 8-column panel, one f32x8
//! accumulator per row whose lanes are the panel's columns. Per block, a kernel's `BlockDot`
//! leaves each row's exact integer dot product per column in an i32x8; the epilogue here turns
//! it into f32 the same way for every kernel (one convert, one or two fmas per row and block, in
//! block order), which is what makes the AVX2, VNNI and scalar kernels bit-identical.
//!
//! Everything here is `#[inline(always)]` and compiled inside each kernel's `#[target_feature]`
//! entry point, so each kernel is still one straight-line function with its own instructions.

use std::arch::x86_64::*;

use super::activation::QuantizedRows;
use super::factors::{sub_block_positions, Factors, Width};
use super::pack::{Mins, Panel, QuantKind, NIBBLE_BYTES};
use super::{BLOCK, PANEL};

/// `QuantKind` as a const generic (enums cannot be const parameters on stable Rust).
pub(super) const NIBBLE: u8 = 0;
pub(super) const UNSIGNED: u8 = 1;
pub(super) const SIGNED: u8 = 2;

/// One kernel's integer part: a block's dot products of `R` rows against the panel.
pub(super) trait BlockDot {
    /// Row `r`'s exact integer dot product with each of the panel's 8 columns over block `wb`
    /// (`KIND`'s layout), the row's block of 32 i8 activations starting at `x(r)`, whose
    /// `-128 * sum` is `bias_offset(r)`.
    ///
    /// # Safety
    ///
    /// The CPU has the kernel's features; `wb` holds one packed block of `KIND` and each
    /// `x(r)` for `r < R` 32 readable bytes and each `bias_offset(r)` a readable `i32`.
    unsafe fn dots<const R: usize, const KIND: u8>(
        wb: *const u8,
        x: impl Fn(usize) -> *const i8,
        bias_offset: impl Fn(usize) -> *const i32,
    ) -> [__m256i; R];
}

/// Group `g`'s 4 activations of the block at `x`, in every lane: each column's 4 weight quants
/// of the group meet the same 4 activations.
///
/// # Safety
///
/// AVX2, and the 4 bytes at `x.add(4 * g)` readable (`g < 8`); no alignment is required.
#[inline(always)]
pub(super) unsafe fn group(x: *const i8, g: usize) -> __m256i {
    _mm256_set1_epi32(std::ptr::read_unaligned(x.add(4 * g) as *const i32))
}

/// Group `g`'s 32 quants of an `Unsigned` panel block at `wb` (`pack.rs`): the nibbles of
/// vector `g % 4` (its low ones for `g < 4`, else its high ones) plus 16 where the group's
/// fifth-bit word has the byte's bit.
///
/// # Safety
///
/// AVX2, and `wb` one readable `Unsigned` panel block; `g < 8`.
#[inline(always)]
pub(super) unsafe fn five_bit_group(wb: *const u8, g: usize) -> __m256i {
    let v = _mm256_loadu_si256(wb.add((g % 4) * BLOCK) as *const __m256i);
    let v = if g < 4 { v } else { _mm256_srli_epi16::<4>(v) };
    let nibbles = _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
    let word = _mm256_set1_epi32(std::ptr::read_unaligned(wb.add(NIBBLE_BYTES + 4 * g) as *const i32));
    // Byte `i` takes the word's byte `i / 8` (`vpshufb` indexes within each 128-bit lane, and
    // every lane holds the whole word), then tests bit `i % 8` of it.
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(word, spread), bit), bit);
    _mm256_or_si256(nibbles, _mm256_and_si256(set, _mm256_set1_epi8(16)))
}

/// `factors::Width` as a const generic.
pub(super) const HALF: u8 = 0;
pub(super) const SINGLE: u8 = 1;
pub(super) const SUB_BLOCK: u8 = 2;

/// The const generic of a width.
pub(super) fn width_code(width: Width) -> u8 {
    match width {
        Width::Half => HALF,
        Width::Single => SINGLE,
        Width::SubBlock => SUB_BLOCK,
    }
}

/// The 8 values from value `i` of `f` as f32, `f` of width `W` (`i` a multiple of `PANEL`).
///
/// # Safety
///
/// F16C, AVX2, and `f` holds at least `i + 8` values of width `W`.
#[inline(always)]
pub(super) unsafe fn factors8<const W: u8>(f: Factors<'_>, i: usize) -> __m256 {
    if W == HALF {
        _mm256_cvtph_ps(_mm_loadu_si128(f.as_ptr().add(2 * i) as *const __m128i))
    } else if W == SINGLE {
        _mm256_loadu_ps((f.as_ptr() as *const f32).add(i))
    } else {
        let (super_at, sub_at) = sub_block_positions(i);
        let subs = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(f.as_ptr().add(sub_at) as *const __m128i)));
        let supers = _mm256_cvtph_ps(_mm_loadu_si128(f.as_ptr().add(super_at) as *const __m128i));
        _mm256_mul_ps(supers, subs)
    }
}

/// Rows `row0..row0 + n` (`n <= 4`) of the panel's output into `o`, `n` rows of `PANEL`.
///
/// # Safety
///
/// AVX2, FMA, F16C and `D`'s features, and the bounds `kernel_avx2::in_bounds` checks for
/// those rows.
#[inline(always)]
pub(super) unsafe fn tile_rows<D: BlockDot>(
    panel: &Panel<'_>,
    act: &QuantizedRows,
    row0: usize,
    n: usize,
    o: &mut [f32],
) {
    match (width_code(panel.scales.width()), panel.kind) {
        (HALF, QuantKind::Nibble) => tile_height::<D, HALF, NIBBLE>(panel, act, row0, n, o),
        (HALF, QuantKind::Unsigned) => tile_height::<D, HALF, UNSIGNED>(panel, act, row0, n, o),
        (HALF, QuantKind::Signed) => tile_height::<D, HALF, SIGNED>(panel, act, row0, n, o),
        (SINGLE, QuantKind::Nibble) => tile_height::<D, SINGLE, NIBBLE>(panel, act, row0, n, o),
        (SINGLE, QuantKind::Unsigned) => tile_height::<D, SINGLE, UNSIGNED>(panel, act, row0, n, o),
        (SINGLE, QuantKind::Signed) => tile_height::<D, SINGLE, SIGNED>(panel, act, row0, n, o),
        // Q4_K and Q5_K are packed with sub-block factors (`in_bounds` checks which kinds).
        (SUB_BLOCK, QuantKind::Unsigned) => tile_height::<D, SUB_BLOCK, UNSIGNED>(panel, act, row0, n, o),
        _ => tile_height::<D, SUB_BLOCK, NIBBLE>(panel, act, row0, n, o),
    }
}

/// `tile_rows` for one scale width and kind: `n` rows as a const.
#[inline(always)]
unsafe fn tile_height<D: BlockDot, const W: u8, const KIND: u8>(
    panel: &Panel<'_>,
    act: &QuantizedRows,
    row0: usize,
    n: usize,
    o: &mut [f32],
) {
    match n {
        1 => tile_n::<D, W, 1, KIND>(panel, act, row0, o),
        2 => tile_n::<D, W, 2, KIND>(panel, act, row0, o),
        3 => tile_n::<D, W, 3, KIND>(panel, act, row0, o),
        _ => tile_n::<D, W, 4, KIND>(panel, act, row0, o),
    }
}

/// # Safety
///
/// As `tile_rows`, for `R` rows (among the bounds: `out.len() >= R * PANEL`).
// `r` selects the same row of `dots`, `acc` and the activations in lockstep.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn tile_n<D: BlockDot, const W: u8, const R: usize, const KIND: u8>(
    panel: &Panel<'_>,
    act: &QuantizedRows,
    row0: usize,
    out: &mut [f32],
) {
    let (k, nb) = (act.in_features, panel.blocks);
    let block_bytes = panel.kind.panel_block_bytes();
    let xq = act.quants.as_ptr().add(row0 * k);
    let xs = act.scales.as_ptr().add(row0 * nb);
    let sums = act.sums.as_ptr().add(row0 * nb);
    let offsets = act.bias_offsets.as_ptr().add(row0 * nb);
    let wq = panel.quants.as_ptr();
    let mut acc = [_mm256_setzero_ps(); R];
    for b in 0..nb {
        // The block's factors before its dot products, so that unpacking them (Q4_K's sub-block
        // factors take a few registers) never competes with `R` rows of sums.
        let dw = factors8::<W>(panel.scales, b * PANEL);
        let dm = match panel.mins {
            Mins::Stored(mins) => factors8::<W>(mins, b * PANEL),
            Mins::OfScale(k) => _mm256_mul_ps(dw, _mm256_set1_ps(k)),
            Mins::Absent => _mm256_setzero_ps(),
        };
        let dots =
            D::dots::<R, KIND>(wq.add(b * block_bytes), |r| xq.add(r * k + b * BLOCK), |r| offsets.add(r * nb + b));
        for r in 0..R {
            let scale = _mm256_mul_ps(dw, _mm256_set1_ps(*xs.add(r * nb + b)));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots[r]), scale, acc[r]);
        }
        if KIND != SIGNED {
            for r in 0..R {
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(*sums.add(r * nb + b)), dm, acc[r]);
            }
        }
    }
    for r in 0..R {
        _mm256_storeu_ps(out.as_mut_ptr().add(r * PANEL), acc[r]);
    }
}
