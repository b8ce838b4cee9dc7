//! The token embedding table, looked up row by row.
//!
//! Dequantized whole, a GGUF model's `token_embd.weight` would be an f32 `[vocab, hidden]`
//! table of 113 MB for SmolLM2-135M and 545 MB for Qwen2.5-0.5B, most of a small model's
//! resident memory, of which a step reads only the rows of its tokens. So the table stays in
//! its GGUF blocks and a lookup decodes just the rows it returns.
//!
//! A row of `hidden` values is `hidden / block_size` whole blocks, contiguous in the tensor,
//! and candle decodes each block on its own (`GgmlType::to_float`), so decoding one row gives
//! exactly the values that dequantizing the whole table gives for that row: the engine's
//! outputs do not change (tests/embedding.rs checks every supported format bit for bit).

use candle_core::quantized::QTensor;
use candle_core::{Device, Tensor};

use crate::error::{ModelError, Result};
use crate::ops;

/// The `[rows, hidden]` token embedding table of a model.
pub struct Embedding {
    table: Table,
    rows: usize,
    hidden: usize,
}

enum Table {
    /// GGUF blocks; `QTensor::embedding` decodes the requested rows with the same
    /// `to_float` as `dequantize`, one row's blocks at a time.
    Blocks(QTensor),
    /// f32 values, row-major: Hugging Face checkpoints (whose weights are all dense f32), and
    /// any GGUF tensor `QTensor::embedding` could not slice by rows.
    Dense(Vec<f32>),
}

impl Embedding {
    /// Keeps `weight` (`[rows, hidden]`) in its GGUF blocks where a row is a whole number of
    /// blocks in host memory; otherwise dequantizes it once into a dense table, as before.
    pub fn from_qtensor(weight: QTensor) -> Result<Self> {
        let (rows, hidden) = weight
            .shape()
            .dims2()
            .map_err(|e| ModelError::Unsupported(format!("token embedding is not a 2-D table ({e})")))?;
        // candle 0.11 already refuses a quantized tensor whose rows end inside a block, and
        // the engine loads GGUF weights on the CPU; the check keeps a lookup correct (dense,
        // as before) should either ever change, since `QTensor::embedding` needs both.
        let row_aligned = hidden.is_multiple_of(weight.dtype().block_size());
        if row_aligned && weight.device().is_cpu() {
            return Ok(Self { table: Table::Blocks(weight), rows, hidden });
        }
        tracing::debug!(dtype = ?weight.dtype(), hidden, "token embedding rows are not whole blocks; keeping it dense f32");
        let values = ops::values_of(&weight.dequantize(&Device::Cpu)?)?;
        Self::from_dense(values, hidden)
    }

    /// A dense table of `values.len() / hidden` rows.
    pub fn from_dense(values: Vec<f32>, hidden: usize) -> Result<Self> {
        if hidden == 0 || !values.len().is_multiple_of(hidden) {
            return Err(ModelError::Unsupported(format!(
                "token embedding of {} values is not a whole number of {hidden}-wide rows",
                values.len()
            )));
        }
        Ok(Self { rows: values.len() / hidden, hidden, table: Table::Dense(values) })
    }

    /// Number of rows (the vocabulary size of the table).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Width of a row (the model's hidden size).
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// Whether lookups decode GGUF blocks (`true`) or read a dense f32 table.
    pub fn is_quantized(&self) -> bool {
        matches!(self.table, Table::Blocks(_))
    }

    /// Bytes the table holds in memory.
    pub fn size_in_bytes(&self) -> usize {
        match &self.table {
            Table::Blocks(q) => q.storage_size_in_bytes(),
            Table::Dense(v) => std::mem::size_of_val(v.as_slice()),
        }
    }

    /// Rows `ids` as f32, packed `[n, hidden]`. An id beyond the table is an
    /// `InvalidBatch` error (a request's token ids come from outside the engine).
    pub fn gather(&self, ids: impl Iterator<Item = usize>) -> Result<Vec<f32>> {
        match &self.table {
            Table::Dense(values) => ops::gather_rows(values, self.hidden, ids),
            Table::Blocks(q) => {
                // Checked here rather than left to candle, which would report it as a generic
                // candle error; the range check also makes the `u32` conversion lossless.
                let ids = ids
                    .map(|id| match u32::try_from(id) {
                        Ok(v) if id < self.rows => Ok(v),
                        _ => Err(self.out_of_range(id)),
                    })
                    .collect::<Result<Vec<u32>>>()?;
                if ids.is_empty() {
                    return Ok(Vec::new());
                }
                let n = ids.len();
                let ids = Tensor::from_vec(ids, n, &Device::Cpu)?;
                Ok(q.embedding(&ids)?.flatten_all()?.to_vec1::<f32>()?)
            }
        }
    }

    fn out_of_range(&self, id: usize) -> ModelError {
        ModelError::InvalidBatch(format!("row {id} beyond the table's {} rows", self.rows))
    }
}

impl std::fmt::Debug for Embedding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.table {
            Table::Blocks(q) => format!("{:?}", q.dtype()),
            Table::Dense(_) => "dense f32".to_string(),
        };
        write!(f, "Embedding[{} x {}; {kind}]", self.rows, self.hidden)
    }
}
