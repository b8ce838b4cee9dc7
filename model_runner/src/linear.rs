use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{Module, Tensor};

use crate::error::Result;

/// How projections multiply a batch of rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulMode {
    /// candle's quantized kernels for every batch, with attention mirroring candle-transformers'
    /// ops: results comparable bit for bit with its reference models (see `attention_exact`).
    /// Least memory, but on CPU the kernels decode the weights again for every row, so a step
    /// of 64 rows costs almost 64 single rows.
    Quantized,
    /// Keep an f32 copy of every weight and run a GEMM once a step has at least `min_rows`
    /// rows, amortising weight decoding over the rows; fewer rows keep the quantized GEMV.
    DenseAbove { min_rows: usize },
}

impl Default for MatmulMode {
    fn default() -> Self {
        Self::DenseAbove { min_rows: 8 }
    }
}

/// A projection `y = x W^T (+ b)` over `[rows, in]` activations.
pub struct Linear {
    quantized: QMatMul,
    /// `W^T` as `[in, out]` f32, present only in `DenseAbove` mode.
    dense_t: Option<Tensor>,
    bias: Option<Tensor>,
    min_dense_rows: usize,
}

impl Linear {
    pub fn new(weight: QTensor, bias: Option<Tensor>, mode: MatmulMode) -> Result<Self> {
        let device = weight.device();
        let (dense_t, min_dense_rows) = match mode {
            MatmulMode::Quantized => (None, usize::MAX),
            MatmulMode::DenseAbove { min_rows } => {
                let w = weight.dequantize(&device)?;
                (Some(w.t()?.contiguous()?), min_rows)
            }
        };
        Ok(Self { quantized: QMatMul::from_qtensor(weight)?, dense_t, bias, min_dense_rows })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let rows = x.dim(0)?;
        let y = match &self.dense_t {
            Some(w) if rows >= self.min_dense_rows => x.matmul(w)?,
            _ => self.quantized.forward(x)?,
        };
        Ok(match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }
}
