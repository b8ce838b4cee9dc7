use crate::error::{ModelError, Result};
use crate::kv_groups::KvGroups;

/// One sequence's slice of a packed batch. Its `query_len` rows start at `query_start`; they
/// attend to `context_len` keys already in the paged cache (read through the block table of
/// each layer's group) and, causally, to each other: row `i` sees keys `0..=context_len + i`
/// (the last `w` of them in a layer with a window of `w`).
///
/// Whether a row's K/V persists is decided by `ForwardBatch::slot_mappings` alone.
#[derive(Clone, Debug, PartialEq)]
pub struct SeqSpan {
    pub query_start: usize,
    pub query_len: usize,
    pub context_len: usize,
    /// One block table per KV cache group (`KvGroups`). A windowed group's entries for blocks
    /// before the first row's window are never read, so they may name no block at all (the
    /// scheduler gives such blocks back to its pool).
    pub block_tables: Vec<Vec<u32>>,
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
    /// Per KV cache group, the cache slot of each row's K/V in that group's pages; -1 keeps it
    /// scratch (used by this forward only).
    pub slot_mappings: Vec<Vec<i64>>,
    pub seqs: Vec<SeqSpan>,
    /// Rows whose logits are returned, in this order.
    pub logits_rows: Vec<usize>,
}

impl ForwardBatch {
    pub fn num_rows(&self) -> usize {
        self.input_ids.len()
    }

    /// Rejects a malformed batch before any kernel indexes with it.
    pub fn validate(&self, vocab_size: usize, num_slots: usize, block_size: usize, groups: &KvGroups) -> Result<()> {
        let rows = self.input_ids.len();
        if self.positions.len() != rows {
            return Err(ModelError::InvalidBatch(format!("{rows} input ids but {} positions", self.positions.len())));
        }
        if self.slot_mappings.len() != groups.num_groups() {
            return Err(ModelError::InvalidBatch(format!(
                "{} slot mappings for {} KV cache groups",
                self.slot_mappings.len(),
                groups.num_groups()
            )));
        }
        for mapping in &self.slot_mappings {
            if mapping.len() != rows {
                return Err(ModelError::InvalidBatch(format!("{rows} input ids but {} slots", mapping.len())));
            }
            if let Some(&slot) = mapping.iter().find(|&&s| s < -1 || s >= num_slots as i64) {
                return Err(ModelError::InvalidBatch(format!("slot {slot} outside the cache of {num_slots} slots")));
            }
        }
        if let Some(&id) = self.input_ids.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(ModelError::InvalidBatch(format!("token id {id} outside the vocabulary of {vocab_size}")));
        }
        let num_blocks = num_slots / block_size;
        let mut covered = vec![false; rows];
        for (i, span) in self.seqs.iter().enumerate() {
            let end = span.query_start + span.query_len;
            if span.query_len == 0 || end > rows {
                return Err(ModelError::InvalidBatch(format!(
                    "span {i} rows {}..{end} outside the {rows} rows",
                    span.query_start
                )));
            }
            if span.block_tables.len() != groups.num_groups() {
                return Err(ModelError::InvalidBatch(format!(
                    "span {i} has {} block tables for {} KV cache groups",
                    span.block_tables.len(),
                    groups.num_groups()
                )));
            }
            for (table, window) in span.block_tables.iter().zip(groups.windows()) {
                let needed_blocks = span.context_len.div_ceil(block_size);
                if table.len() < needed_blocks {
                    return Err(ModelError::InvalidBatch(format!(
                        "span {i} has context {} but only {} blocks",
                        span.context_len,
                        table.len()
                    )));
                }
                // The span's first row attends from here on; blocks before it are never read.
                let first_read = window.map_or(0, |w| (span.context_len + 1).saturating_sub(w) / block_size);
                if table.iter().skip(first_read).any(|&b| b as usize >= num_blocks) {
                    return Err(ModelError::InvalidBatch(format!("span {i} references a block outside the cache")));
                }
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
