//! The AVX2 microkernel's integer part (`kernel_vnni.rs` is its `vpdpbusd` twin; the tile
//! loop and the f32 epilogue they share are in `simd_tile.rs`).
//!
//! A block is 8 groups of 4 inputs. Each group's weight vector (4 quants of each column) is
//! loaded once and multiplied against the group's 4 activations of every row of the tile,
//! broadcast to all lanes: `_mm256_maddubs_epi16` (u8 x i8 -> pairwise i16 sums) and
//! `_mm256_madd_epi16` with ones leave column `c`'s products summed in lane `c`. 4-bit quants
//! add the i16 sums of all 8 groups before the single `madd` (8 x 2 x 15 x 127 = 30480 fits
//! in i16), 5-bit ones of 4 groups (4 x 2 x 31 x 127 = 31496); signed Q8_0-style weights go
//! through the sign trick (`|w|` as u8 times `x` with `w`'s sign, at most 2 x 128 x 127 =
//! 32512 per pair) and widen every group. So the integer part is exact, and per block one
//! convert and one or two fmas per row finish all 8 columns: the f32 operations match
//! `kernel_scalar.rs` one for one.

use super::activation::QuantizedRows;
use super::factors::Width;
use super::pack::{Mins, Panel, QuantKind};
use super::{kernel_scalar, BLOCK, PANEL};

/// Rows per tile: 4 accumulators plus 4 integer sums and the weight registers fit the 16
/// vector registers without spills.
pub(super) const TILE_ROWS: usize = 4;

/// Whether this CPU can run the kernel (checked again on every call, which is a cached load).
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Same contract as `kernel_scalar::tile`, which it falls back to without AVX2.
pub(crate) fn tile(panel: &Panel<'_>, act: &QuantizedRows, row0: usize, rows: usize, out: &mut [f32]) {
    if !in_bounds(panel, act, row0, rows, out) || !available() {
        return kernel_scalar::tile(panel, act, row0, rows, out);
    }
    #[cfg(target_arch = "x86_64")]
    by_row_tiles(rows, out, |r, n, o| {
        // SAFETY: `available()` confirmed AVX2, FMA and F16C, and `in_bounds` bounds every pointer
        // offset the kernel forms (rows `row0 + r .. + n`, blocks `0..nb`, the panel's bytes).
        unsafe { imp::tile_rows(panel, act, row0 + r, n, o) }
    });
}

/// Calls `tile(r, n, out_rows)` for rows `r..r + n` in runs of at most `TILE_ROWS`, with
/// `out_rows` those rows' `n * PANEL` outputs.
#[cfg(target_arch = "x86_64")]
pub(super) fn by_row_tiles(rows: usize, out: &mut [f32], mut tile: impl FnMut(usize, usize, &mut [f32])) {
    let mut r = 0;
    while r < rows {
        let n = (rows - r).min(TILE_ROWS);
        tile(r, n, &mut out[r * PANEL..(r + n) * PANEL]);
        r += n;
    }
}

/// Whether every raw-pointer read and write of a SIMD kernel's tile stays inside the panel, the
/// activations and `out`: checked once per tile, it keeps the kernels sound for any input.
pub(super) fn in_bounds(panel: &Panel<'_>, act: &QuantizedRows, row0: usize, rows: usize, out: &[f32]) -> bool {
    let nb = panel.blocks;
    act.blocks == nb
        && act.in_features == nb * BLOCK
        && panel.quants.len() == nb * panel.kind.panel_block_bytes()
        && panel.scales.holds(nb * PANEL)
        && (panel.scales.width() != Width::SubBlock || panel.kind != QuantKind::Signed)
        && match panel.mins {
            Mins::Absent => panel.kind == QuantKind::Signed,
            Mins::Stored(mins) => {
                panel.kind != QuantKind::Signed && mins.holds(nb * PANEL) && mins.width() == panel.scales.width()
            }
            Mins::OfScale(_) => panel.kind != QuantKind::Signed,
        }
        && row0 + rows <= act.rows()
        && act.scales.len() >= (row0 + rows) * nb
        && act.sums.len() >= (row0 + rows) * nb
        && act.bias_offsets.len() >= (row0 + rows) * nb
        && out.len() >= rows * PANEL
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    use super::super::activation::QuantizedRows;
    use super::super::pack::Panel;
    use super::super::simd_tile::{self, group, BlockDot, NIBBLE, SIGNED, UNSIGNED};
    use super::super::BLOCK;

    /// # Safety
    ///
    /// AVX2, FMA and F16C, and the bounds checked by `in_bounds` for rows `row0..row0 + n`,
    /// `n <= 4`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn tile_rows(panel: &Panel<'_>, act: &QuantizedRows, row0: usize, n: usize, o: &mut [f32]) {
        simd_tile::tile_rows::<Maddubs>(panel, act, row0, n, o)
    }

    /// `maddubs` (u8 x i8 pairs to i16), i16 adds while they cannot overflow, then `madd`
    /// with ones to i32.
    struct Maddubs;

    impl BlockDot for Maddubs {
        // `r` selects the same row of `s16`, `dots` and the activations in lockstep.
        #[allow(clippy::needless_range_loop)]
        #[inline(always)]
        unsafe fn dots<const R: usize, const KIND: u8>(
            wb: *const u8,
            x: impl Fn(usize) -> *const i8,
            _: impl Fn(usize) -> *const i32,
        ) -> [__m256i; R] {
            let ones = _mm256_set1_epi16(1);
            let mut dots = [_mm256_setzero_si256(); R];
            if KIND == NIBBLE {
                let low_nibbles = _mm256_set1_epi8(0x0F);
                let mut s16 = [_mm256_setzero_si256(); R];
                for h in 0..4 {
                    let pair = _mm256_loadu_si256(wb.add(h * BLOCK) as *const __m256i);
                    let lo = _mm256_and_si256(pair, low_nibbles);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(pair), low_nibbles);
                    for r in 0..R {
                        s16[r] = _mm256_add_epi16(s16[r], _mm256_maddubs_epi16(lo, group(x(r), h)));
                        s16[r] = _mm256_add_epi16(s16[r], _mm256_maddubs_epi16(hi, group(x(r), h + 4)));
                    }
                }
                for r in 0..R {
                    dots[r] = _mm256_madd_epi16(s16[r], ones);
                }
            } else if KIND == UNSIGNED {
                for half in 0..2 {
                    let mut s16 = [_mm256_setzero_si256(); R];
                    for g in 4 * half..4 * half + 4 {
                        let w = simd_tile::five_bit_group(wb, g);
                        for r in 0..R {
                            s16[r] = _mm256_add_epi16(s16[r], _mm256_maddubs_epi16(w, group(x(r), g)));
                        }
                    }
                    for r in 0..R {
                        dots[r] = _mm256_add_epi32(dots[r], _mm256_madd_epi16(s16[r], ones));
                    }
                }
            } else if KIND == SIGNED {
                for g in 0..8 {
                    let w = _mm256_loadu_si256(wb.add(g * BLOCK) as *const __m256i);
                    let wu = _mm256_abs_epi8(w);
                    for r in 0..R {
                        let xa = _mm256_sign_epi8(group(x(r), g), w);
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(wu, xa), ones);
                        dots[r] = _mm256_add_epi32(dots[r], p);
                    }
                }
            }
            dots
        }
    }
}
