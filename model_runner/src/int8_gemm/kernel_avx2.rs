//! The AVX2 microkernel: a tile of 2 or 3 rows x one 4-column panel, one f32x8 accumulator each.
//!
//! Each block step loads the panel's 4 weight vectors once and reuses them for every row of
//! the tile (the point of batching: weight decoding is amortised over rows). Products use
//! `_mm256_maddubs_epi16` (u8 x i8 -> pairwise i16 sums) and `_mm256_madd_epi16` with ones
//! (-> i32 sums of 4); 4-bit quants are unpacked from their shared bytes with a shift and a
//! mask. Neither product can saturate: unsigned quants are at most 31 (2*31*127 < 32767),
//! and signed Q8_0 weights go through the sign trick (`|w|` as u8 times `x` with `w`'s sign)
//! where `|w| <= 128` and `|x| <= 127` give at most 2*128*127 = 32512. So the integer part is
//! exact and every f32 operation matches `kernel_scalar.rs` one for one.

use super::activation::QuantizedRows;
use super::pack::{Panel, QuantKind};
use super::{kernel_scalar, BLOCK, PANEL};

/// Whether this CPU can run the kernel (checked again on every call, which is a cached load).
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Same contract as `kernel_scalar::tile`, which it falls back to without AVX2.
/// `scratch` is reused between calls for the tile's scale products.
pub(crate) fn tile(
    panel: &Panel<'_>,
    act: &QuantizedRows,
    row0: usize,
    rows: usize,
    out: &mut [f32],
    scratch: &mut Vec<f32>,
) {
    // The raw-pointer reads below stay inside these bounds; checking them once per tile keeps
    // the kernel sound for any input.
    let nb = panel.blocks;
    let valid = act.blocks == nb
        && act.in_features == nb * BLOCK
        && panel.quants.len() == nb * panel.kind.panel_block_bytes()
        && panel.scales.len() == nb * PANEL
        && (panel.kind == QuantKind::Signed || panel.mins.len() == nb * PANEL)
        && row0 + rows <= act.rows()
        && act.scales.len() >= (row0 + rows) * nb
        && act.sums.len() >= (row0 + rows) * nb
        && out.len() >= rows * PANEL;
    if !valid || !available() {
        return kernel_scalar::tile(panel, act, row0, rows, out);
    }
    #[cfg(target_arch = "x86_64")]
    {
        // Q4-style weights carry a min accumulator per row, so their tiles are 2 rows (8 + 2
        // accumulators); signed weights have none and fit 3 rows (12) in the 16 registers.
        let tile_rows = if panel.kind == QuantKind::Signed { 3 } else { 2 };
        scratch.resize(nb * tile_rows * PANEL, 0.0);
        let sc = scratch.as_mut_slice();
        let mut r = 0;
        while r < rows {
            let n = (rows - r).min(tile_rows);
            let o = &mut out[r * PANEL..(r + n) * PANEL];
            // SAFETY: `available()` confirmed AVX2 and FMA, and `valid` bounds every pointer
            // offset the kernel forms (rows `row0 + r .. + n`, blocks `0..nb`, panel `0..4`),
            // and `sc` was just resized to the `nb * n * PANEL` scale products a tile writes.
            unsafe {
                match (panel.kind, n) {
                    (QuantKind::Unsigned, 1) => imp::tile_n::<1, false, false>(panel, act, row0 + r, o, sc),
                    (QuantKind::Unsigned, _) => imp::tile_n::<2, false, false>(panel, act, row0 + r, o, sc),
                    (QuantKind::Nibble, 1) => imp::tile_n::<1, false, true>(panel, act, row0 + r, o, sc),
                    (QuantKind::Nibble, _) => imp::tile_n::<2, false, true>(panel, act, row0 + r, o, sc),
                    (QuantKind::Signed, 1) => imp::tile_n::<1, true, false>(panel, act, row0 + r, o, sc),
                    (QuantKind::Signed, 2) => imp::tile_n::<2, true, false>(panel, act, row0 + r, o, sc),
                    (QuantKind::Signed, _) => imp::tile_n::<3, true, false>(panel, act, row0 + r, o, sc),
                }
            }
            r += n;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    use super::super::activation::QuantizedRows;
    use super::super::pack::Panel;
    use super::{BLOCK, PANEL};

    /// Caller guarantees AVX2+FMA, the bounds checked in `tile` for rows `row0..row0 + R`,
    /// and `scales.len() >= nb * R * PANEL`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile_n<const R: usize, const SIGNED: bool, const NIBBLE: bool>(
        panel: &Panel<'_>,
        act: &QuantizedRows,
        row0: usize,
        out: &mut [f32],
        scales: &mut [f32],
    ) {
        let (k, nb) = (act.in_features, panel.blocks);
        let xq = act.quants.as_ptr().add(row0 * k);
        let xs = act.scales.as_ptr().add(row0 * nb);
        // Every `dw[c,b] * dx[r,b]` first, 4 columns per multiply, laid out `[b][r][c]`: the
        // main loop then reads each as a broadcast load instead of spending a multiply (and a
        // register) per product; the products are the same IEEE multiplications.
        let sc = scales.as_mut_ptr();
        for b in 0..nb {
            let dw = _mm_loadu_ps(panel.scales.as_ptr().add(b * PANEL));
            for r in 0..R {
                let p = _mm_mul_ps(dw, _mm_set1_ps(*xs.add(r * nb + b)));
                _mm_storeu_ps(sc.add((b * R + r) * PANEL), p);
            }
        }
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); PANEL]; R];
        // Min term `sum_b s[r,b] * m[c,b]` for the panel's 4 columns: the scalar kernel's fma
        // chain in the same block order, run inside the main loop so its latency is hidden.
        let mut min_acc = [_mm_setzero_ps(); R];
        let sums = act.sums.as_ptr().add(row0 * nb);
        let wq = panel.quants.as_ptr();
        let low_nibbles = _mm256_set1_epi8(0x0F);
        // Columns outer, rows inner: one weight register serves the tile's rows while the
        // activations come straight from L1 as memory operands, which leaves the 16 vector
        // registers to the accumulators without spills.
        for b in 0..nb {
            let wb = wq.add(b * if NIBBLE { PANEL / 2 } else { PANEL } * BLOCK);
            let sb = sc.add(b * R * PANEL);
            for c in 0..PANEL {
                let w = if NIBBLE {
                    // Columns 2p and 2p+1 share a load (the unrolled loop reuses it).
                    let pair = _mm256_loadu_si256(wb.add(c / 2 * BLOCK) as *const __m256i);
                    let shifted = if c % 2 == 0 { pair } else { _mm256_srli_epi16::<4>(pair) };
                    _mm256_and_si256(shifted, low_nibbles)
                } else {
                    _mm256_loadu_si256(wb.add(c * BLOCK) as *const __m256i)
                };
                // Signed weights: |w| as the unsigned operand, w's sign moved onto the activations.
                let wu = if SIGNED { _mm256_abs_epi8(w) } else { w };
                for r in 0..R {
                    let x = _mm256_loadu_si256(xq.add(r * k + b * BLOCK) as *const __m256i);
                    let xa = if SIGNED { _mm256_sign_epi8(x, w) } else { x };
                    let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(wu, xa), ones);
                    let scale = _mm256_broadcast_ss(&*sb.add(r * PANEL + c));
                    acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[r][c]);
                }
            }
            if !SIGNED {
                let mins = _mm_loadu_ps(panel.mins.as_ptr().add(b * PANEL));
                for r in 0..R {
                    min_acc[r] = _mm_fmadd_ps(_mm_set1_ps(*sums.add(r * nb + b)), mins, min_acc[r]);
                }
            }
        }
        // The lane tree of `lane_tree_sum` for all 4 columns at once: halves added, then a
        // 4x4 transpose puts lane `l` of every column in vector `e[l]`.
        for r in 0..R {
            let mut t = [_mm_setzero_ps(); PANEL];
            for c in 0..PANEL {
                t[c] = _mm_add_ps(_mm256_castps256_ps128(acc[r][c]), _mm256_extractf128_ps::<1>(acc[r][c]));
            }
            let (u0, u1) = (_mm_unpacklo_ps(t[0], t[1]), _mm_unpackhi_ps(t[0], t[1]));
            let (u2, u3) = (_mm_unpacklo_ps(t[2], t[3]), _mm_unpackhi_ps(t[2], t[3]));
            let (e0, e1) = (_mm_movelh_ps(u0, u2), _mm_movehl_ps(u2, u0));
            let (e2, e3) = (_mm_movelh_ps(u1, u3), _mm_movehl_ps(u3, u1));
            let mut y = _mm_add_ps(_mm_add_ps(e0, e2), _mm_add_ps(e1, e3));
            if !SIGNED {
                y = _mm_add_ps(y, min_acc[r]);
            }
            _mm_storeu_ps(out.as_mut_ptr().add(r * PANEL), y);
        }
    }
}
