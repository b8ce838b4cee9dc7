use crate::config::ModelConfig;
use crate::error::{ModelError, Result};

/// Paged KV storage: per layer, K and V of shape `[num_blocks, block_size, kv_heads, head_dim]`,
/// allocated once. Plain `Vec<f32>` rather than tensors because the attention kernel reads
/// single rows through block tables and writes single slots, which tensor ops would copy.
pub struct KvCache {
    layers: Vec<LayerKv>,
    num_blocks: usize,
    block_size: usize,
    row_len: usize,
}

pub struct LayerKv {
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

impl KvCache {
    pub fn new(config: &ModelConfig, num_blocks: usize, block_size: usize) -> Result<Self> {
        if num_blocks == 0 || block_size == 0 {
            return Err(ModelError::KvCache(format!(
                "need at least one block of at least one slot (got {num_blocks} x {block_size})"
            )));
        }
        let row_len = config.num_kv_heads * config.head_dim;
        let len = num_blocks * block_size * row_len;
        let layers = (0..config.num_layers)
            .map(|_| LayerKv { k: vec![0.0; len], v: vec![0.0; len] })
            .collect();
        Ok(Self { layers, num_blocks, block_size, row_len })
    }

    /// Blocks that fit in `budget_bytes`, so callers size the pool from memory, not a guess.
    pub fn blocks_for_budget(config: &ModelConfig, block_size: usize, budget_bytes: usize) -> usize {
        budget_bytes / (config.kv_bytes_per_token() * block_size).max(1)
    }

    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_slots(&self) -> usize {
        self.num_blocks * self.block_size
    }

    /// Floats per slot (kv_heads * head_dim).
    pub fn row_len(&self) -> usize {
        self.row_len
    }

    pub fn layer(&self, layer: usize) -> &LayerKv {
        &self.layers[layer]
    }

    /// Persists the rows whose slot is not -1; `k`/`v` are `[rows, kv_heads * head_dim]`.
    pub fn store(&mut self, layer: usize, slot_mapping: &[i64], k: &[f32], v: &[f32]) {
        let row_len = self.row_len;
        let kv = &mut self.layers[layer];
        for (row, &slot) in slot_mapping.iter().enumerate() {
            if slot < 0 {
                continue;
            }
            let dst = slot as usize * row_len;
            let src = row * row_len;
            kv.k[dst..dst + row_len].copy_from_slice(&k[src..src + row_len]);
            kv.v[dst..dst + row_len].copy_from_slice(&v[src..src + row_len]);
        }
    }

    /// K and V of one slot in one layer (tests compare committed K/V against a fresh prefill).
    pub fn read_slot(&self, layer: usize, slot: usize) -> (&[f32], &[f32]) {
        let kv = &self.layers[layer];
        let start = slot * self.row_len;
        (&kv.k[start..start + self.row_len], &kv.v[start..start + self.row_len])
    }
}
