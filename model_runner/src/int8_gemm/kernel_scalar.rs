//! The portable kernel: the reference for the operation order the AVX2 kernel must follow.
//!
//! Per output `(r, c)`: `acc = 0`; for each block in increasing order, the block's exact
//! integer dot product is converted to f32 and fused-multiply-added with `dw * dx`, then (for
//! weights with a min) `s * m` is fused-multiply-added. `f32::mul_add` is a correctly rounded
//! fma on every platform, as `_mm256_fmadd_ps` is.

use super::activation::QuantizedRows;
use super::pack::{Panel, QuantKind};
use super::{BLOCK, PANEL};

/// Computes `out[r * PANEL + c]` for rows `row0..row0 + rows` and the panel's columns.
pub(crate) fn tile(panel: &Panel<'_>, act: &QuantizedRows, row0: usize, rows: usize, out: &mut [f32]) {
    let (k, nb) = (act.in_features, panel.blocks);
    for r in 0..rows {
        let row = row0 + r;
        for c in 0..PANEL {
            let mut acc = 0.0f32;
            for b in 0..nb {
                let at = b * PANEL + c;
                let x = &act.quants[row * k + b * BLOCK..row * k + (b + 1) * BLOCK];
                let dot: i32 = (0..BLOCK).map(|j| panel.quant(b, c, j) * x[j] as i32).sum();
                let scale = panel.scales.get(at) * act.scales[row * nb + b];
                acc = (dot as f32).mul_add(scale, acc);
                if panel.kind != QuantKind::Signed {
                    acc = act.sums[row * nb + b].mul_add(panel.min(at), acc);
                }
            }
            out[r * PANEL + c] = acc;
        }
    }
}
