//! The portable kernel: the reference for the operation order the AVX2 kernel must follow.
//!
//! Per output `(r, c)`: for each block in increasing order, 8 lane sums of 4 exact integer
//! products (elements `4l..4l+4` in lane `l`, as `_mm256_madd_epi16` groups them) are
//! converted to f32 and fused-multiply-added with `dw * dx`; then the lanes are summed in the
//! fixed tree of `lane_tree_sum`, and the min term (an fma chain over blocks) is added last.
//! `f32::mul_add` is a correctly rounded fma on every platform, as `_mm256_fmadd_ps` is.

use super::activation::QuantizedRows;
use super::pack::{Panel, QuantKind};
use super::{lane_tree_sum, BLOCK, PANEL};

/// Computes `out[r * PANEL + c]` for rows `row0..row0 + rows` and the panel's columns.
pub(crate) fn tile(panel: &Panel<'_>, act: &QuantizedRows, row0: usize, rows: usize, out: &mut [f32]) {
    let (k, nb) = (act.in_features, panel.blocks);
    for r in 0..rows {
        let row = row0 + r;
        for c in 0..PANEL {
            let mut acc = [0.0f32; 8];
            for b in 0..nb {
                let at = b * PANEL + c;
                let x = &act.quants[row * k + b * BLOCK..row * k + (b + 1) * BLOCK];
                let scale = panel.scales[at] * act.scales[row * nb + b];
                for (l, lane) in acc.iter_mut().enumerate() {
                    let mut dot = 0i32;
                    for j in 4 * l..4 * l + 4 {
                        dot += panel.quant(b, c, j) * x[j] as i32;
                    }
                    *lane = (dot as f32).mul_add(scale, *lane);
                }
            }
            let mut y = lane_tree_sum(&acc);
            if panel.kind != QuantKind::Signed {
                let mut min_term = 0.0f32;
                for b in 0..nb {
                    min_term = act.sums[row * nb + b].mul_add(panel.mins[b * PANEL + c], min_term);
                }
                y += min_term;
            }
            out[r * PANEL + c] = y;
        }
    }
}
