use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};

use crate::error::{ModelError, Result};
use crate::footprint::ProjectionCost;
use crate::int8_gemm::{self, PackedWeight};
use crate::ops;

/// How projections multiply a batch of rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulMode {
    /// candle's quantized kernels for every batch: each row's result is independent of the
    /// other rows (for the GGUF types without row-count-dependent kernels, e.g. Q4_1, Q8_0),
    /// so a seeded request draws the same tokens whatever else is in the batch. Least memory,
    /// but on CPU the kernels decode the weights again for every row, so a step of 64 rows
    /// costs almost 64 single rows.
    Quantized,
    /// Keep an f32 copy of every weight and run a GEMM once a step has at least `min_rows`
    /// rows, amortising weight decoding over the rows; fewer rows keep the quantized GEMV.
    DenseAbove { min_rows: usize },
    /// Repack quantized weights at load (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K exactly; Q2_K/
    /// Q3_K/Q6_K re-quantized to 8 bits per 32 elements) and run the int8 kernel of
    /// `int8_gemm` for every row count: weight decoding is amortised over the rows of a step,
    /// and each row's result is bit-identical whatever else is in the batch. Other formats
    /// (f16, f32) keep candle's matmul.
    Int8,
}

/// The default keeps results independent of batch composition (the per-request seed
/// promise) and amortises weight decoding over the rows of a step: `Int8`, also the fastest
/// mode at every step size measured (docs/benchmarks/notebook.md, "Int8 matmul").
impl Default for MatmulMode {
    fn default() -> Self {
        Self::Int8
    }
}

/// How attention is computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttentionKernel {
    /// The block-table-aware fused CPU kernel (`attention.rs`): each row independent of the
    /// batch, no gathers.
    #[default]
    Fused,
    /// candle tensor ops mirroring candle-transformers' reference models (`attention_exact.rs`),
    /// for bit-comparable tests; slower with many sequences.
    CandleMirror,
}

/// A projection `y = x W^T (+ b)` over `[rows, in]` activations.
pub struct Linear {
    /// candle's matmul over the GGUF weight, kept only where the int8 repack does not replace
    /// it (a format the repack does not support, or the `Quantized`/`DenseAbove` modes).
    quantized: Option<QMatMul>,
    /// `W^T` as `[in, out]` f32, present in the `DenseAbove` mode.
    dense_t: Option<Tensor>,
    /// The repacked weight, present in the `Int8` mode for supported formats.
    int8: Option<PackedWeight>,
    /// The GGUF format `int8` was packed from.
    int8_format: Option<GgmlDType>,
    bias: Option<Vec<f32>>,
    min_dense_rows: usize,
}

impl Linear {
    pub fn new(weight: QTensor, bias: Option<Tensor>, mode: MatmulMode) -> Result<Self> {
        let device = weight.device();
        let int8 = match mode {
            MatmulMode::Int8 => PackedWeight::from_qtensor(&weight).map_err(int8_err)?,
            _ => None,
        };
        let (dense_t, min_dense_rows) = match mode {
            MatmulMode::Quantized | MatmulMode::Int8 => (None, usize::MAX),
            MatmulMode::DenseAbove { min_rows: from } => {
                let w = weight.dequantize(&device)?;
                (Some(w.t()?.contiguous()?), from)
            }
        };
        let int8_format = int8.as_ref().map(|_| weight.dtype());
        let quantized = if int8.is_some() { None } else { Some(QMatMul::from_qtensor(weight)?) };
        let bias = bias.as_ref().map(ops::values_of).transpose()?;
        Ok(Self { quantized, dense_t, int8, int8_format, bias, min_dense_rows })
    }

    /// A dense projection from an `[out, in]` weight of any float dtype (Hugging Face
    /// safetensors are bf16 or f32), kept once as f32 `W^T`: the GEMM serves every row count,
    /// and the fallback matmul is a view of the same storage, so an 8B model holds one copy.
    pub fn from_dense(weight: &Tensor, bias: Option<Tensor>) -> Result<Self> {
        let dense_t = weight.to_dtype(DType::F32)?.t()?.contiguous()?;
        let bias = bias.as_ref().map(ops::values_of).transpose()?;
        Ok(Self {
            quantized: Some(QMatMul::Tensor(dense_t.t()?)),
            dense_t: Some(dense_t),
            int8: None,
            int8_format: None,
            bias,
            min_dense_rows: 0,
        })
    }

    /// `y = x W^T (+ b)` for `rows` rows of `x` (`[rows, in]`): returns `[rows, out]`.
    pub fn forward(&self, x: &[f32], rows: usize) -> Result<Vec<f32>> {
        self.forward_into(x, rows, Vec::new())
    }

    /// `forward` into `out`'s allocation where the int8 kernel runs (elsewhere `out` is
    /// dropped): the logits, the largest buffer of a step, then reuse one mapping step after
    /// step instead of faulting in fresh pages (docs/benchmarks/notebook.md,
    /// "2026-11-26 06:16-07:51 UTC").
    pub fn forward_into(&self, x: &[f32], rows: usize, out: Vec<f32>) -> Result<Vec<f32>> {
        if let Some(w) = self.int8.as_ref() {
            let mut y = int8_gemm::matmul_into(w, x, rows, int8_gemm::Backend::Auto, out).map_err(int8_err)?;
            self.add_bias(&mut y);
            return Ok(y);
        }
        let xt = Tensor::from_slice(x, (rows, x.len() / rows.max(1)), &Device::Cpu)?;
        let y = match (&self.dense_t, &self.quantized) {
            (Some(w), _) if rows >= self.min_dense_rows => xt.matmul(w)?,
            (_, Some(q)) => q.forward(&xt)?,
            _ => return Err(ModelError::Unsupported("linear layer without a weight for this step".into())),
        };
        let mut y = y.flatten_all()?.to_vec1::<f32>()?;
        self.add_bias(&mut y);
        Ok(y)
    }

    /// `forward` of several projections of the same input (a layer's q/k/v, its gate/up).
    /// Where all of them take the int8 kernel for this step, the input is quantized once and
    /// their columns share one parallel pass; each result is bit-identical to its `forward`.
    pub fn forward_many<const N: usize>(linears: [&Linear; N], x: &[f32], rows: usize) -> Result<[Vec<f32>; N]> {
        let packed: Option<Vec<&PackedWeight>> = linears.iter().map(|l| l.int8.as_ref()).collect();
        let ys = match packed {
            Some(weights) => Self::forward_int8(&linears, weights, x, rows)?,
            None => linears.iter().map(|l| l.forward(x, rows)).collect::<Result<Vec<_>>>()?,
        };
        ys.try_into().map_err(|_| ModelError::Unsupported("projection count changed".into()))
    }

    /// `linears[i]` through its repacked `weights[i]`, all in one `matmul_many` call.
    fn forward_int8(linears: &[&Linear], weights: Vec<&PackedWeight>, x: &[f32], rows: usize) -> Result<Vec<Vec<f32>>> {
        let mut ys = int8_gemm::matmul_many(&weights, x, rows).map_err(int8_err)?;
        for (l, y) in linears.iter().zip(ys.iter_mut()) {
            l.add_bias(y);
        }
        Ok(ys)
    }

    /// What one row costs this projection: the bytes a one-row step reads (the repacked
    /// weight, else candle's quantized or dense one) and its multiply-adds.
    pub fn cost(&self, lm_head: bool) -> ProjectionCost {
        let (bytes, macs) = match (&self.int8, &self.quantized) {
            (Some(w), _) => (w.packed_bytes(), w.in_features() * w.out_features()),
            (None, Some(QMatMul::QTensor(q))) => (q.storage_size_in_bytes(), q.shape().elem_count()),
            (None, Some(QMatMul::Tensor(t) | QMatMul::TensorF16(t))) => {
                (t.elem_count() * t.dtype().size_in_bytes(), t.elem_count())
            }
            (None, None) => self.dense_t.as_ref().map_or((0, 0), |t| (t.elem_count() * 4, t.elem_count())),
        };
        ProjectionCost { int8_format: self.int8_format, lm_head, bytes, macs }
    }

    /// The bias added to every output row, if any.
    pub fn bias(&self) -> Option<&[f32]> {
        self.bias.as_deref()
    }

    fn add_bias(&self, y: &mut [f32]) {
        if let Some(b) = &self.bias {
            ops::add_bias(y, b);
        }
    }
}

fn int8_err(e: int8_gemm::Int8GemmError) -> ModelError {
    ModelError::Unsupported(format!("int8 matmul: {e}"))
}
