//! The forward's elementwise and per-row operations on plain `[rows, width]` f32 buffers.
//!
//! Each performs the IEEE operations of the candle op it replaces, in the same order (RMSNorm's
//! sequential sum of squares, `x / m * alpha`; SiLU as `v / (1 + exp(-v))`), so the engine
//! stays bit-identical to candle-transformers' models in the tests that compare them. Running
//! them here instead of through candle keeps them off candle's own CPU thread pool, whose
//! workers spin at a barrier on the same two cores rayon's matmul tasks use
//! (docs/benchmarks/notebook.md, "2026-11-22 19:10 UTC").

use candle_core::{DType, Tensor};
use rayon::prelude::*;

use crate::error::{ModelError, Result};
use crate::gated_activation::{gelu_tanh_mul_chunk, silu_mul_chunk};

/// Below this many elements an elementwise or per-block operation (here, and the activation
/// quantization of `int8_gemm`) runs on the calling thread.
pub(crate) const PARALLEL_FROM: usize = 1 << 15;

/// RMSNorm of every `alpha.len()`-wide row of `x`, like `candle_nn::ops::rms_norm`.
pub fn rms_norm(x: &[f32], alpha: &[f32], eps: f32) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    let width = alpha.len();
    let row = |(src, dst): (&[f32], &mut [f32])| {
        let sum2 = src.iter().map(|&v| v * v).sum::<f32>();
        let m = (sum2 / width as f32 + eps).sqrt();
        for ((d, &s), &a) in dst.iter_mut().zip(src).zip(alpha) {
            *d = s / m * a;
        }
    };
    if x.len() < PARALLEL_FROM {
        x.chunks(width).zip(out.chunks_mut(width)).for_each(row);
    } else {
        x.par_chunks(width).zip(out.par_chunks_mut(width)).for_each(row);
    }
    out
}

/// `gate = silu(gate) * up`, elementwise (candle's `silu(gate) * up`; the exponential in
/// vector registers, `gated_activation.rs`).
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    if gate.len() < PARALLEL_FROM {
        silu_mul_chunk(gate, up);
    } else {
        const CHUNK: usize = 4096;
        gate.par_chunks_mut(CHUNK).zip(up.par_chunks(CHUNK)).for_each(|(g, u)| silu_mul_chunk(g, u));
    }
}

/// `gate = gelu_tanh(gate) * up`, elementwise: candle's and ggml's tanh approximation
/// `0.5 v (1 + tanh(sqrt(2/pi) v (1 + 0.044715 v^2)))`, computed as the equal sigmoid
/// `v / (1 + exp(-2 sqrt(2/pi) v (1 + 0.044715 v^2)))` (`gated_activation.rs`).
pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    if gate.len() < PARALLEL_FROM {
        gelu_tanh_mul_chunk(gate, up);
    } else {
        const CHUNK: usize = 4096;
        gate.par_chunks_mut(CHUNK).zip(up.par_chunks(CHUNK)).for_each(|(g, u)| gelu_tanh_mul_chunk(g, u));
    }
}

/// `x += y`, elementwise (the residual connection).
pub fn add_in_place(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, &b)| *a += b);
}

/// `y[r] += bias` for every `bias.len()`-wide row of `y`.
pub fn add_bias(y: &mut [f32], bias: &[f32]) {
    y.chunks_mut(bias.len()).for_each(|row| add_in_place(row, bias));
}

/// Rows `ids` of a `[n, width]` table, concatenated.
pub fn gather_rows(table: &[f32], width: usize, ids: impl IntoIterator<Item = usize>) -> Result<Vec<f32>> {
    let n = table.len() / width.max(1);
    let mut out = Vec::new();
    for id in ids {
        let row = table
            .get(id * width..(id + 1) * width)
            .ok_or_else(|| ModelError::InvalidBatch(format!("row {id} beyond the table's {n} rows")))?;
        out.extend_from_slice(row);
    }
    Ok(out)
}

/// A tensor's values as f32, flattened (weights and biases at load).
pub fn values_of(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) % 2001).map(|v| v as f32 / 250.0 - 4.0).collect()
    }

    fn candle(t: candle_core::Result<Tensor>) -> Vec<f32> {
        t.and_then(|t| t.flatten_all()?.to_vec1::<f32>()).expect("candle op")
    }

    /// Bit-identical to candle's ops on both sides of the parallel threshold.
    #[test]
    fn ops_match_candle_bit_for_bit() {
        for rows in [3, 80] {
            let width = 576;
            let x = values(rows * width, 1);
            let alpha = values(width, 2);
            let xt = Tensor::from_slice(&x, (rows, width), &Device::Cpu).expect("tensor");
            let at = Tensor::from_slice(&alpha, width, &Device::Cpu).expect("tensor");
            assert_eq!(rms_norm(&x, &alpha, 1e-5), candle(candle_nn::ops::rms_norm(&xt, &at, 1e-5)));

            let up = values(rows * width, 3);
            let ut = Tensor::from_slice(&up, (rows, width), &Device::Cpu).expect("tensor");
            let mut gate = x.clone();
            silu_mul(&mut gate, &up);
            assert_eq!(gate, candle(candle_nn::ops::silu(&xt).and_then(|s| s * &ut)));

            let mut sum = x.clone();
            add_in_place(&mut sum, &up);
            assert_eq!(sum, candle(&xt + &ut));
            let mut biased = x.clone();
            add_bias(&mut biased, &alpha);
            assert_eq!(biased, candle(xt.broadcast_add(&at)));
        }
    }

    /// The GELU agrees with candle's tanh-approximated `gelu` (the op candle-transformers'
    /// Gemma models run) to float rounding, on both sides of the parallel threshold.
    #[test]
    fn gelu_tanh_mul_matches_candles_gelu() {
        for rows in [3, 80] {
            let width = 576;
            let x: Vec<f32> = values(rows * width, 4).iter().map(|v| v * 4.0).collect();
            let up = values(rows * width, 6);
            let xt = Tensor::from_slice(&x, (rows, width), &Device::Cpu).expect("tensor");
            let ut = Tensor::from_slice(&up, (rows, width), &Device::Cpu).expect("tensor");
            let want = candle(xt.gelu().and_then(|g| g * &ut));
            let mut got = x.clone();
            gelu_tanh_mul(&mut got, &up);
            for ((g, w), v) in got.iter().zip(&want).zip(&x) {
                assert!((g - w).abs() <= 1e-6 * (1.0 + w.abs()), "gelu({v}): {g} against candle's {w}");
            }
        }
    }

    #[test]
    fn gather_rejects_rows_beyond_the_table() {
        let table = values(4 * 3, 5);
        assert_eq!(gather_rows(&table, 3, [2, 0]).expect("in range"), [&table[6..9], &table[0..3]].concat());
        assert!(matches!(gather_rows(&table, 3, [4]), Err(ModelError::InvalidBatch(_))));
    }
}
