//! Batch-invariant int8 GEMM for quantized projections on x86 CPUs.
//!
//! candle's quantized CPU matmul decodes every weight block again for each activation row, so a
//! step of 64 rows costs almost 64 single rows. Here the weights are repacked once at load
//! (`pack.rs`) into 8-column panels of integer quants whose vector lanes are the columns
//! (4-bit formats two quants per byte), with per-32-block scales (f16 where exact); each step
//! quantizes its activation rows to int8 blocks (`activation.rs`, per row, like ggml's Q8_1), and the
//! microkernel (`kernel_avx2.rs`, `kernel_vnni.rs` where the CPU has `vpdpbusd`, or
//! `kernel_zmm.rs`, two panels per 512-bit register, where it has AVX-512 VNNI) reuses every
//! weight load across a tile of rows (4 in the 256-bit kernels, 8 in the 512-bit one).
//! Projections of one input (a layer's q/k/v, its gate/up) share one quantization and one
//! parallel pass (`matmul_many`).
//!
//! Batch invariance: the value of output `(r, c)` is a fixed sequence of IEEE operations on
//! row `r`'s quantized activations and column `c`'s weights: `acc = 0`, then per block `b` in
//! increasing order the exact integer dot product of the block is converted to f32 and
//! fused-multiply-added with the scale `dw[c,b] * dx[r,b]`, followed (for weights with a min)
//! by the fma of the min term `s[r,b] * m[c,b]`. Nothing depends on how many rows the step
//! has, which tile a row lands in, or how columns are split over threads, so a row's result is
//! bit-identical alone or inside any batch. `kernel_scalar.rs` performs the same operations in
//! the same order, so it is also bit-identical to the AVX2 and VNNI kernels.

mod activation;
mod factors;
mod formats;
mod kernel_avx2;
mod kernel_scalar;
mod kernel_vnni;
mod kernel_zmm;
mod pack;
mod quant_bytes;
#[cfg(target_arch = "x86_64")]
mod simd_tile;

pub use activation::{quantize_rows, QuantizedRows};
pub use pack::{PackedWeight, QuantKind};
pub(crate) use quant_bytes::release_freed_heap;
pub use quant_bytes::QuantBytes;

use rayon::prelude::*;
use thiserror::Error;

/// Elements per quantization block (weights and activations).
pub const BLOCK: usize = 32;
/// Output columns interleaved per panel: one f32x8 accumulator per row covers the panel.
pub const PANEL: usize = 8;
/// Rows computed per kernel call before their outputs are stored: one tile of the 512-bit
/// kernel, two of the 256-bit ones.
const WRITE_ROWS: usize = 8;
/// Below this many multiply-adds (about 40 KB of 4-bit weights) a call runs on the calling
/// thread. Even small projections gain from both cores: at batch 1, SmolLM2's o_proj (0.33M)
/// is faster split over the pool than on one thread, and a lower threshold gained nothing
/// (docs/benchmarks/notebook.md, "2026-11-26 09:04-10:00 UTC").
const PARALLEL_FROM_MACS: usize = 1 << 16;

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
    #[error("mapping memory for a packed weight of {bytes} bytes failed: {kind}")]
    Memory { bytes: usize, kind: std::io::ErrorKind },
}

/// Which kernel implementation runs; `Auto` picks 512-bit VNNI, else 256-bit VNNI, else AVX2,
/// else the scalar kernel. All give the same bits; the others exist so tests and benches can
/// compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Auto,
    /// 256-bit registers, one panel per tile, even where the 512-bit kernel exists: VNNI where
    /// the CPU has it, else as `Avx2`.
    Vnni256,
    /// The AVX2 kernel even where VNNI exists (scalar without AVX2).
    Avx2,
    /// The portable kernel (same operation order, same bits).
    Scalar,
}

/// The kernel a backend runs on this CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// Two panels per tile in zmm registers; a task's odd last panel goes through the ymm
    /// VNNI kernel.
    Zmm,
    Vnni(kernel_vnni::Isa),
    Avx2,
    Scalar,
}

impl Kernel {
    fn of(backend: Backend) -> Self {
        if backend == Backend::Auto && kernel_zmm::available() {
            return Kernel::Zmm;
        }
        let vnni = kernel_vnni::available().filter(|_| matches!(backend, Backend::Auto | Backend::Vnni256));
        match vnni {
            Some(isa) => Kernel::Vnni(isa),
            None if backend != Backend::Scalar && kernel_avx2::available() => Kernel::Avx2,
            None => Kernel::Scalar,
        }
    }
}

/// The kernel `Backend::Auto` runs here, for logs and benchmark records.
pub fn auto_kernel_name() -> &'static str {
    match Kernel::of(Backend::Auto) {
        Kernel::Zmm => "avx512-vnni-zmm",
        Kernel::Vnni(kernel_vnni::Isa::AvxVnni) => "avx-vnni",
        Kernel::Vnni(kernel_vnni::Isa::Avx512Vnni) => "avx512-vnni",
        Kernel::Avx2 => "avx2",
        Kernel::Scalar => "scalar",
    }
}

/// `y = x W^T` for `rows` activation rows `x` (`[rows, in]`, row-major): returns `[rows, out]`.
pub fn matmul(weight: &PackedWeight, x: &[f32], rows: usize) -> Result<Vec<f32>, Int8GemmError> {
    matmul_with(weight, x, rows, Backend::Auto)
}

pub fn matmul_with(weight: &PackedWeight, x: &[f32], rows: usize, backend: Backend) -> Result<Vec<f32>, Int8GemmError> {
    matmul_into(weight, x, rows, backend, Vec::new())
}

/// `matmul_with` into `out`'s allocation (its contents are replaced): a caller that keeps a
/// large output across steps (the logits) spares the allocator a fresh mapping, and the kernel
/// its page faults, every step.
pub fn matmul_into(
    weight: &PackedWeight,
    x: &[f32],
    rows: usize,
    backend: Backend,
    out: Vec<f32>,
) -> Result<Vec<f32>, Int8GemmError> {
    Ok(matmul_many_into(&[weight], x, rows, backend, vec![out])?.pop().unwrap_or_default())
}

/// `y_i = x W_i^T` for weights sharing one input (a layer's q/k/v, its gate/up): the rows are
/// quantized once and every weight's panels go through one parallel pass. Each output is
/// bit-identical to `matmul` of its weight alone.
pub fn matmul_many(weights: &[&PackedWeight], x: &[f32], rows: usize) -> Result<Vec<Vec<f32>>, Int8GemmError> {
    matmul_many_with(weights, x, rows, Backend::Auto)
}

pub fn matmul_many_with(
    weights: &[&PackedWeight],
    x: &[f32],
    rows: usize,
    backend: Backend,
) -> Result<Vec<Vec<f32>>, Int8GemmError> {
    matmul_many_into(weights, x, rows, backend, weights.iter().map(|_| Vec::new()).collect())
}

/// `matmul_many_with` into the allocations of `outputs`, one per weight.
fn matmul_many_into(
    weights: &[&PackedWeight],
    x: &[f32],
    rows: usize,
    backend: Backend,
    mut outputs: Vec<Vec<f32>>,
) -> Result<Vec<Vec<f32>>, Int8GemmError> {
    let Some(first) = weights.first() else { return Ok(Vec::new()) };
    let k = first.in_features();
    for w in weights {
        if x.len() != rows * w.in_features() {
            return Err(Int8GemmError::ShapeMismatch { rows, cols: w.in_features(), got: x.len() });
        }
    }
    let total_panels: usize = weights.iter().map(|w| w.num_panels()).sum();
    if rows == 0 || total_panels == 0 {
        return Ok(weights.iter().map(|w| vec![0.0f32; rows * w.out_features()]).collect());
    }
    // Left uninitialized: the tasks below write every element (every panel of every weight, all
    // rows), so zeroing first would only add a pass over the largest buffers of a step (the
    // lm_head's logits).
    for (y, w) in outputs.iter_mut().zip(weights) {
        y.clear();
        y.reserve(rows * w.out_features());
    }
    let act = quantize_rows(x, rows, k);
    let kernel = Kernel::of(backend);
    let macs = rows * k * total_panels * PANEL;
    let threads = if macs < PARALLEL_FROM_MACS { 1 } else { rayon::current_num_threads().max(1) };
    // About four tasks per thread balances the two cores without tiny tasks; a task is a run
    // of one weight's panels, so the columns it writes belong to it alone.
    let per_task = total_panels.div_ceil(4 * threads).max(1);
    // Even runs for the 512-bit kernel, so only a weight's odd last panel runs alone.
    let per_task = if kernel == Kernel::Zmm { per_task.next_multiple_of(2) } else { per_task };
    let tasks: Vec<(usize, usize)> = weights
        .iter()
        .enumerate()
        .flat_map(|(i, w)| (0..w.num_panels()).step_by(per_task).map(move |p| (i, p)))
        .collect();
    let targets: Vec<Output> = outputs.iter_mut().map(|y| Output(y.as_mut_ptr())).collect();
    let run = |&(i, first_panel): &(usize, usize)| {
        let (weight, y) = (weights[i], targets[i]);
        let n = weight.out_features();
        let mut tile = [0.0f32; WRITE_ROWS * PANEL];
        let mut pair = [0.0f32; WRITE_ROWS * PANEL];
        let write = |p: usize, row0: usize, tile: &[f32]| {
            let cols = PANEL.min(n - p * PANEL);
            let (tile_rows, _) = tile.as_chunks::<PANEL>();
            for (r, values) in tile_rows.iter().enumerate() {
                let at = y.at((row0 + r) * n + p * PANEL);
                // SAFETY: `y` points at a `rows * n` allocation (`outputs[i]`, untouched until
                // every task is done), `(row0 + r) * n + p * PANEL + cols <= rows * n`, and
                // panel `p` of weight `i` belongs to this task alone, so no two tasks write the
                // same element. A full panel is one fixed-size move; a `cols`-long copy would
                // be a `memcpy` call per row and panel (mostly the lm_head;
                // docs/benchmarks/notebook.md, "2026-11-22 22:00 UTC").
                unsafe {
                    if cols == PANEL {
                        (at as *mut [f32; PANEL]).write_unaligned(*values);
                    } else {
                        std::ptr::copy_nonoverlapping(values.as_ptr(), at, cols);
                    }
                }
            }
        };
        let end = (first_panel + per_task).min(weight.num_panels());
        // The 512-bit kernel pairs panel `i` of the task's first half with panel `i` of its
        // second rather than two neighbours: a thread then reads two streams of quants (and
        // of factors) instead of one, and at batch 1, where the weights stream from DRAM, that
        // reads them faster (docs/benchmarks/notebook.md, "2026-11-27 05:24-06:09 UTC").
        let half = if kernel == Kernel::Zmm { (end - first_panel) / 2 } else { 0 };
        let pairs = (first_panel..first_panel + half).map(|p| (p, Some(p + half)));
        let singles = (first_panel + 2 * half..end).map(|p| (p, None));
        for (p, q) in pairs.chain(singles) {
            let (a, b) = (weight.panel(p), q.map(|q| weight.panel(q)));
            // The panels' weights stay in L1 while every row tile streams past them. Each
            // tile's rows are stored before the next tile is computed: the strided stores miss
            // the cache, and a whole panel's worth at once (up to 128 of them) stalled the
            // kernel on a full store queue (docs/benchmarks/notebook.md,
            // "2026-11-26 06:16-07:51 UTC").
            for row0 in (0..rows).step_by(WRITE_ROWS) {
                let m = (rows - row0).min(WRITE_ROWS);
                let (ta, tb) = (&mut tile[..m * PANEL], &mut pair[..m * PANEL]);
                match (kernel, &b) {
                    (Kernel::Zmm, Some(b)) => kernel_zmm::tile_pair(&a, b, &act, row0, m, ta, tb),
                    (Kernel::Zmm, None) => kernel_vnni::tile(kernel_vnni::Isa::Avx512Vnni, &a, &act, row0, m, ta),
                    (Kernel::Vnni(isa), _) => kernel_vnni::tile(isa, &a, &act, row0, m, ta),
                    (Kernel::Avx2, _) => kernel_avx2::tile(&a, &act, row0, m, ta),
                    (Kernel::Scalar, _) => kernel_scalar::tile(&a, &act, row0, m, ta),
                }
                write(p, row0, ta);
                if let Some(q) = q {
                    write(q, row0, tb);
                }
            }
        }
    };
    if threads == 1 {
        tasks.iter().for_each(run);
    } else {
        tasks.par_iter().for_each(run);
    }
    for (y, w) in outputs.iter_mut().zip(weights) {
        // SAFETY: the tasks, all finished, wrote each of the `rows * out` elements (see above).
        unsafe { y.set_len(rows * w.out_features()) };
    }
    Ok(outputs)
}

/// Kernel test inputs: xorshift values in [-1, 1), the same sequence for the same `seed`.
#[cfg(test)]
pub(crate) fn xorshift_values(mut seed: u64) -> impl FnMut(usize) -> Vec<f32> {
    move |len| {
        (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }
}

/// A signed-kind weight whose quants run over every `i8` from -128 to 127 (a GGUF's Q8_0 may
/// hold -128, which the weight bias of the VNNI kernels must carry exactly), with varied scales.
#[cfg(test)]
pub(crate) fn full_range_signed(out_features: usize, in_features: usize) -> PackedWeight {
    PackedWeight::from_blocks(pack::QuantKind::Signed, None, out_features, in_features, |col, b| {
        let q = std::array::from_fn(|i| ((col * 37 + b * 11 + i * 5) % 256) as u8);
        formats::Block32 { q, d: 0.01 + (col % 5) as f32 * 0.003 - b as f32 * 0.001, m: 0.0, sub: None }
    })
    .expect("a test weight fits in memory")
}

/// An output buffer shared by the tasks of one call, each writing its own columns.
#[derive(Clone, Copy)]
struct Output(*mut f32);

// SAFETY: tasks write disjoint elements (see `matmul_many_with`) and the buffer outlives them.
unsafe impl Send for Output {}
// SAFETY: sharing an `Output` only shares the pointer value (`at` copies it); the writes made
// through it by concurrent tasks go to disjoint elements, as for `Send` above.
unsafe impl Sync for Output {}

impl Output {
    /// A method, so closures capture the `Sync` wrapper rather than its raw-pointer field.
    fn at(self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}
