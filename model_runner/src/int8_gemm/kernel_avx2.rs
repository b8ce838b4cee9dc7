//! The AVX2 microkernel: a tile of up to 3 rows x one 4-column panel, 12 f32x8 accumulators.
//!
//! Each block step loads the panel's 4 weight vectors once and reuses them for every row of
//! the tile (the point of batching: weight decoding is amortised over rows). Products use
//! `_mm256_maddubs_epi16` (u8 x i8 -> pairwise i16 sums) and `_mm256_madd_epi16` with ones
//! (-> i32 sums of 4). Neither can saturate: unsigned quants are at most 31 (2*31*127 < 32767),
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
        && panel.quants.len() == nb * PANEL * BLOCK
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
        scratch.resize(nb * 3 * PANEL, 0.0);
        let sc = scratch.as_mut_slice();
        let mut r = 0;
        while r < rows {
            let n = (rows - r).min(3);
            let o = &mut out[r * PANEL..(r + n) * PANEL];
            // SAFETY: `available()` confirmed AVX2 and FMA, and `valid` bounds every pointer
            // offset the kernel forms (rows `row0 + r .. + n`, blocks `0..nb`, panel `0..4`),
            // and `sc` was just resized to the `nb * 3 * PANEL` scale products a tile writes.
            unsafe {
                match (panel.kind, n) {
                    (QuantKind::Unsigned, 1) => imp::tile_n::<1, false>(panel, act, row0 + r, o, sc),
                    (QuantKind::Unsigned, 2) => imp::tile_n::<2, false>(panel, act, row0 + r, o, sc),
                    (QuantKind::Unsigned, _) => imp::tile_n::<3, false>(panel, act, row0 + r, o, sc),
                    (QuantKind::Signed, 1) => imp::tile_n::<1, true>(panel, act, row0 + r, o, sc),
                    (QuantKind::Signed, 2) => imp::tile_n::<2, true>(panel, act, row0 + r, o, sc),
                    (QuantKind::Signed, _) => imp::tile_n::<3, true>(panel, act, row0 + r, o, sc),
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
    use super::super::lane_tree_sum;
    use super::super::pack::Panel;
    use super::{BLOCK, PANEL};

    /// Caller guarantees AVX2+FMA, the bounds checked in `tile` for rows `row0..row0 + R`,
    /// and `scales.len() >= nb * R * PANEL`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile_n<const R: usize, const SIGNED: bool>(
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
        let wq = panel.quants.as_ptr();
        // Columns outer, rows inner: one weight register serves the tile's rows while the
        // activations come straight from L1 as memory operands, which leaves the 16 vector
        // registers to the 12 accumulators without spills.
        for b in 0..nb {
            let wb = wq.add(b * PANEL * BLOCK);
            let sb = sc.add(b * R * PANEL);
            for c in 0..PANEL {
                let w = _mm256_loadu_si256(wb.add(c * BLOCK) as *const __m256i);
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
        }
        for r in 0..R {
            for c in 0..PANEL {
                let mut lanes = [0.0f32; 8];
                _mm256_storeu_ps(lanes.as_mut_ptr(), acc[r][c]);
                out[r * PANEL + c] = lane_tree_sum(&lanes);
            }
            if !SIGNED {
                // Min term, lanes = the panel's 4 columns: the same fma chain as the scalar kernel.
                let sums = act.sums.as_ptr().add((row0 + r) * nb);
                let mins = panel.mins.as_ptr();
                let mut m = _mm_setzero_ps();
                for b in 0..nb {
                    m = _mm_fmadd_ps(_mm_set1_ps(*sums.add(b)), _mm_loadu_ps(mins.add(b * PANEL)), m);
                }
                let mut mt = [0.0f32; PANEL];
                _mm_storeu_ps(mt.as_mut_ptr(), m);
                for c in 0..PANEL {
                    out[r * PANEL + c] += mt[c];
                }
            }
        }
    }
}
