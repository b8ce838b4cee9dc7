use crate::error::{ModelError, Result};

/// One sequence's slice of a packed batch. Its `query_len` rows start at `query_start`; they
/// attend to `context_len` keys already in the paged cache (read through `block_table`) and,
/// causally, to each other: row `i` sees keys `0..=context_len + i`.
///
/// Several spans may share a `block_table` (an MTI unconditional span reads its sequence's
/// context); whether a row's K/V persists is decided by `ForwardBatch::slot_mapping` alone.
#[derive(Clone, Debug, PartialEq)]
pub struct SeqSpan {
    pub query_start: usize,
    pub query_len: usize,
    pub context_len: usize,
    pub block_table: Vec<u32>,
    /// Entropix needs the last layer's attention scores of this span's last row.
    pub want_attn_metrics: bool,
    /// Compute those metrics as over a cache of this many slots whose empty slots score 0
    /// (the reference's padded cache, `metrics::attention_metrics_padded`); `None`: over the
    /// keys that exist.
    pub attn_pad_to: Option<usize>,
}

/// The packed varlen batch of one engine step (the llama.cpp `llama_batch` / nano-vllm
/// `Context` shape): flat per-row arrays plus per-sequence spans.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ForwardBatch {
    pub input_ids: Vec<u32>,
    pub positions: Vec<u32>,
    /// Cache slot for each row's K/V; -1 keeps it scratch (used by this forward only).
    pub slot_mapping: Vec<i64>,
    pub seqs: Vec<SeqSpan>,
    /// Rows whose logits are returned, in this order.
    pub logits_rows: Vec<usize>,
}

impl ForwardBatch {
    pub fn num_rows(&self) -> usize {
        self.input_ids.len()
    }

    /// Rejects a malformed batch before any kernel indexes with it.
    pub fn validate(&self, vocab_size: usize, num_slots: usize, block_size: usize) -> Result<()> {
        let rows = self.input_ids.len();
        if self.positions.len() != rows || self.slot_mapping.len() != rows {
            return Err(ModelError::InvalidBatch(format!(
                "{rows} input ids but {} positions and {} slots",
                self.positions.len(),
                self.slot_mapping.len()
            )));
        }
        if let Some(&id) = self.input_ids.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(ModelError::InvalidBatch(format!("token id {id} outside the vocabulary of {vocab_size}")));
        }
        if let Some(&slot) = self.slot_mapping.iter().find(|&&s| s < -1 || s >= num_slots as i64) {
            return Err(ModelError::InvalidBatch(format!("slot {slot} outside the cache of {num_slots} slots")));
        }
        let mut covered = vec![false; rows];
        for (i, span) in self.seqs.iter().enumerate() {
            let end = span.query_start + span.query_len;
            if span.query_len == 0 || end > rows {
                return Err(ModelError::InvalidBatch(format!(
                    "span {i} rows {}..{end} outside the {rows} rows",
                    span.query_start
                )));
            }
            let needed_blocks = span.context_len.div_ceil(block_size);
            if span.block_table.len() < needed_blocks {
                return Err(ModelError::InvalidBatch(format!(
                    "span {i} has context {} but only {} blocks",
                    span.context_len,
                    span.block_table.len()
                )));
            }
            let num_blocks = num_slots / block_size;
            if span.block_table.iter().any(|&b| b as usize >= num_blocks) {
                return Err(ModelError::InvalidBatch(format!("span {i} references a block outside the cache")));
            }
            for flag in &mut covered[span.query_start..end] {
                if *flag {
                    return Err(ModelError::InvalidBatch(format!("span {i} overlaps another")));
                }
                *flag = true;
            }
        }
        if covered.iter().any(|c| !c) {
            return Err(ModelError::InvalidBatch("a row belongs to no span".into()));
        }
        if let Some(&row) = self.logits_rows.iter().find(|&&r| r >= rows) {
            return Err(ModelError::InvalidBatch(format!("logits row {row} >= {rows} rows")));
        }
        Ok(())
    }
}
