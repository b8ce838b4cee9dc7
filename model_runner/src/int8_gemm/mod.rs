//! Batch-invariant int8 GEMM for quantized projections on x86 CPUs without VNNI.
//!
//! candle's quantized CPU matmul decodes every weight block again for each activation row, so a
//! step of 64 rows costs almost 64 single rows. Here the weights are repacked once at load
//! (`pack.rs`) into 4-column panels of integer quants with per-32-block f32 scales, each step
//! quantizes its activation rows to int8 blocks (`activation.rs`, per row, like ggml's Q8_1),
//! and the microkernel (`kernel_avx2.rs`) reuses every weight load across a tile of rows.
//!
//! Batch invariance: the value of output `(r, c)` is a fixed sequence of IEEE operations on
//! row `r`'s quantized activations and column `c`'s weights: per block `b` in increasing order,
//! 8 exact i32 lane sums are converted to f32 and fused-multiply-added with the scale
//! `dw[c,b] * dx[r,b]` into 8 lane accumulators, the lanes are summed in one fixed tree, and the
//! min term `sum_b s[r,b] * m[c,b]` (fma chain, increasing `b`) is added last. Nothing depends on
//! how many rows the step has, which tile a row lands in, or how columns are split over threads,
//! so a row's result is bit-identical alone or inside any batch. `kernel_scalar.rs` performs the
//! same operations in the same order, so it is also bit-identical to the AVX2 kernel.

mod activation;
mod formats;
mod kernel_avx2;
mod kernel_scalar;
mod pack;

pub use activation::{quantize_rows, QuantizedRows};
pub use pack::{PackedWeight, QuantKind};

use rayon::prelude::*;
use thiserror::Error;

/// Elements per quantization block (weights and activations).
pub const BLOCK: usize = 32;
/// Output columns interleaved per panel: one microkernel tile covers the whole panel.
pub const PANEL: usize = 4;
/// Rows per microkernel tile: 3 rows x 4 columns = 12 accumulators of the 16 AVX2 registers.
const TILE_ROWS: usize = 3;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum Int8GemmError {
    #[error("activations have {got} values, expected {rows} rows x {cols} inputs")]
    ShapeMismatch { rows: usize, cols: usize, got: usize },
    #[error("weight has {cols} inputs per row, not a multiple of the {block}-element block")]
    BadBlockCount { cols: usize, block: usize },
    #[error("reading weight data: {0}")]
    Data(String),
    #[error("weight data has {got} bytes, expected {expected}")]
    BadDataLength { got: usize, expected: usize },
}

/// Which kernel implementation runs; `Auto` picks AVX2 when the CPU has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Auto,
    /// The portable kernel (same operation order, same bits); used by tests to compare.
    Scalar,
}

/// `y = x W^T` for `rows` activation rows `x` (`[rows, in]`, row-major): returns `[rows, out]`.
pub fn matmul(weight: &PackedWeight, x: &[f32], rows: usize) -> Result<Vec<f32>, Int8GemmError> {
    matmul_with(weight, x, rows, Backend::Auto)
}

pub fn matmul_with(
    weight: &PackedWeight,
    x: &[f32],
    rows: usize,
    backend: Backend,
) -> Result<Vec<f32>, Int8GemmError> {
    let (n, k) = (weight.out_features(), weight.in_features());
    if x.len() != rows * k {
        return Err(Int8GemmError::ShapeMismatch { rows, cols: k, got: x.len() });
    }
    if rows == 0 || n == 0 {
        return Ok(vec![0.0; rows * n]);
    }
    let act = quantize_rows(x, rows, k);
    let use_avx2 = backend == Backend::Auto && kernel_avx2::available();
    let panels = weight.num_panels();
    // About four tasks per thread balances the two cores without tiny tasks; each task owns a
    // contiguous run of panels, so its output slice is disjoint from every other task's.
    let per_task = panels.div_ceil(4 * rayon::current_num_threads().max(1)).max(1);
    // Panel-major scratch `[panel][row][PANEL]`, scattered to row-major `y` afterwards.
    let mut tmp = vec![0.0f32; panels * rows * PANEL];
    tmp.par_chunks_mut(per_task * rows * PANEL).enumerate().for_each(|(task, chunk)| {
        let mut scratch = Vec::new();
        for (i, out) in chunk.chunks_mut(rows * PANEL).enumerate() {
            let panel = weight.panel(task * per_task + i);
            // The panel's weights stay in L1 while every row tile streams past them.
            let mut row0 = 0;
            while row0 < rows {
                let tile = (rows - row0).min(TILE_ROWS);
                let out = &mut out[row0 * PANEL..(row0 + tile) * PANEL];
                if use_avx2 {
                    kernel_avx2::tile(&panel, &act, row0, tile, out, &mut scratch);
                } else {
                    kernel_scalar::tile(&panel, &act, row0, tile, out);
                }
                row0 += tile;
            }
        }
    });
    let mut y = vec![0.0f32; rows * n];
    for (p, block) in tmp.chunks(rows * PANEL).enumerate() {
        for r in 0..rows {
            for c in 0..PANEL.min(n - p * PANEL) {
                y[r * n + p * PANEL + c] = block[r * PANEL + c];
            }
        }
    }
    Ok(y)
}

/// Sums 8 lane accumulators in the tree the AVX2 kernel uses (halves, then pairs, then the
/// last two), so both kernels round identically.
#[inline(always)]
pub(crate) fn lane_tree_sum(a: &[f32; 8]) -> f32 {
    let t = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (t[0] + t[2]) + (t[1] + t[3])
}
