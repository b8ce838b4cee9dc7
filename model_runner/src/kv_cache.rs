use std::sync::Arc;

use crate::config::ModelConfig;
use crate::error::{ModelError, Result};
use crate::kv_f16::F16Slots;
use crate::kv_groups::KvGroups;
use crate::kv_q8::{self, Q8Slots};

/// How the cache stores K and V values (the engine's default depends on the model and the
/// matmul mode: `EngineConfig::kv_cache_dtype()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvDtype {
    /// Exact: what candle-transformers' models keep, so the engine stays bit-comparable
    /// with them.
    F32,
    /// Half the bytes (as llama.cpp's default cache): a decode step streams the whole context's
    /// K/V from memory, so this cuts the attention's memory traffic in half. Values are rounded
    /// to f16 (about 3 decimal digits) once, when a step computes them, whether or not they are
    /// persisted, so results still do not depend on chunking or batching.
    F16,
    /// int8 values with an f16 scale per 32 values of a head (`kv_q8`): about 1.9x the tokens
    /// of the f16 cache in the same memory, and attention reads it with integer dot products
    /// (`attention_q8`) instead of converting it back.
    Q8,
}

impl std::str::FromStr for KvDtype {
    type Err = String;

    /// `f32`, `f16` or `q8`, as the command line spells them (`q8_0`, llama.cpp's name, too).
    fn from_str(name: &str) -> std::result::Result<Self, String> {
        match name {
            "f32" => Ok(KvDtype::F32),
            "f16" => Ok(KvDtype::F16),
            "q8" | "q8_0" => Ok(KvDtype::Q8),
            other => Err(format!("unknown KV cache dtype `{other}` (f32, f16 or q8)")),
        }
    }
}

/// Paged KV storage in pages shared by the layer groups of `KvGroups`: one tensor per position
/// in a group, `[num_blocks, block_size, kv_heads, head_dim]` for K and for V, allocated once;
/// layer `l` stores into tensor `groups.slot_of(l)` at the pages of its group's block table. A
/// model without windows is one group, so this is one tensor per layer. Plain vectors rather
/// than tensors because the attention kernel reads single rows through block tables and writes
/// single slots, which tensor ops would copy.
pub struct KvCache {
    tensors: Vec<LayerKv>,
    groups: KvGroups,
    num_blocks: usize,
    block_size: usize,
    row_len: usize,
    head_dim: usize,
    dtype: KvDtype,
    /// Per layer, what a q8 cache subtracts from its keys (`kv_q8`); empty: nothing.
    key_offsets: Vec<Option<Arc<[f32]>>>,
}

/// K and V rows in the cache's dtype (both always of the same one): one layer of the cache,
/// or one step's new rows, converted once so that the cache stores them and attention reads
/// them without another conversion.
pub enum LayerKv {
    F32(KvValues),
    F16(F16Slots),
    Q8(Q8Slots),
}

pub struct KvValues {
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

impl KvValues {
    fn copy_slots_within(&mut self, from: usize, to: usize, count: usize, row_len: usize) {
        let (from, to, len) = (from * row_len, to * row_len, count * row_len);
        self.k.copy_within(from..from + len, to);
        self.v.copy_within(from..from + len, to);
    }

    fn copy_slot(&mut self, to: usize, src: &KvValues, from: usize, row_len: usize) {
        let (to, from) = (to * row_len, from * row_len);
        self.k[to..to + row_len].copy_from_slice(&src.k[from..from + row_len]);
        self.v[to..to + row_len].copy_from_slice(&src.v[from..from + row_len]);
    }
}

impl LayerKv {
    fn zeros(dtype: KvDtype, head_dim: usize, row_len: usize, num_slots: usize) -> Self {
        let len = num_slots * row_len;
        match dtype {
            KvDtype::F32 => LayerKv::F32(KvValues { k: vec![0.0; len], v: vec![0.0; len] }),
            KvDtype::F16 => LayerKv::F16(F16Slots::zeros(num_slots, row_len, head_dim)),
            KvDtype::Q8 => LayerKv::Q8(Q8Slots::zeros(num_slots, row_len, head_dim)),
        }
    }

    /// A step's K and V rows (`[rows, row_len]` f32, `row_len` = KV heads x `head_dim`) in
    /// `dtype`, row `i` in slot `i`. f16 and q8 round each value once, here, so a key reads the
    /// same from this step as from the cache later. q8 quantizes the keys less `key_offset`
    /// (the layer's, `kv_q8`); the other dtypes keep keys whole and ignore it.
    pub fn from_rows(
        dtype: KvDtype,
        head_dim: usize,
        row_len: usize,
        k: Vec<f32>,
        v: Vec<f32>,
        key_offset: Option<Arc<[f32]>>,
    ) -> Self {
        match dtype {
            KvDtype::F32 => LayerKv::F32(KvValues { k, v }),
            KvDtype::F16 => LayerKv::F16(F16Slots::from_rows(&k, &v, row_len, head_dim)),
            KvDtype::Q8 => LayerKv::Q8(Q8Slots::quantize(&k, &v, row_len, head_dim, key_offset)),
        }
    }

    /// What was subtracted from these rows' keys before they were stored (q8 step rows).
    pub fn key_offset(&self) -> Option<&[f32]> {
        match self {
            LayerKv::Q8(kv) => kv.key_offset.as_deref(),
            _ => None,
        }
    }

    pub fn dtype(&self) -> KvDtype {
        match self {
            LayerKv::F32(_) => KvDtype::F32,
            LayerKv::F16(_) => KvDtype::F16,
            LayerKv::Q8(_) => KvDtype::Q8,
        }
    }

    /// Copies slot `from` of `src` into slot `to` of `self`; both of one dtype.
    fn copy_slot(&mut self, to: usize, src: &LayerKv, from: usize, row_len: usize) -> Result<()> {
        match (self, src) {
            (LayerKv::F32(d), LayerKv::F32(s)) => d.copy_slot(to, s, from, row_len),
            (LayerKv::F16(d), LayerKv::F16(s)) => d.copy_slot(to, s, from),
            (LayerKv::Q8(d), LayerKv::Q8(s)) => d.copy_slot(to, s, from),
            (d, s) => {
                return Err(ModelError::KvCache(format!("{:?} rows written to a {:?} cache", s.dtype(), d.dtype())))
            }
        }
        Ok(())
    }

    /// Copies `count` slots from slot `from` on to slot `to` on, within this tensor.
    fn copy_slots_within(&mut self, from: usize, to: usize, count: usize, row_len: usize) {
        match self {
            LayerKv::F32(kv) => kv.copy_slots_within(from, to, count, row_len),
            LayerKv::F16(kv) => kv.copy_slots_within(from, to, count),
            LayerKv::Q8(kv) => kv.copy_slots_within(from, to, count),
        }
    }

    /// K and V of `count` slots from slot `first` on, as f32 rows of `row_len`; q8 keys less
    /// their layer's key offset.
    pub fn read(&self, first: usize, count: usize, row_len: usize) -> (Vec<f32>, Vec<f32>) {
        let (at, len) = (first * row_len, count * row_len);
        match self {
            LayerKv::F32(kv) => (kv.k[at..at + len].to_vec(), kv.v[at..at + len].to_vec()),
            LayerKv::F16(kv) => kv.read(first, count),
            LayerKv::Q8(kv) => kv.dequantize(first, count),
        }
    }
}

impl KvCache {
    pub fn new(config: &ModelConfig, num_blocks: usize, block_size: usize, dtype: KvDtype) -> Result<Self> {
        if num_blocks == 0 || block_size == 0 {
            return Err(ModelError::KvCache(format!(
                "need at least one block of at least one slot (got {num_blocks} x {block_size})"
            )));
        }
        let row_len = config.num_kv_heads * config.head_dim;
        let head_dim = config.head_dim;
        if dtype == KvDtype::Q8 && !head_dim.is_multiple_of(4) {
            return Err(ModelError::KvCache(format!(
                "the q8 cache needs a head size that is a multiple of 4 (this model's is {head_dim}); use f16"
            )));
        }
        let groups = KvGroups::for_model(config);
        let num_slots = num_blocks * block_size;
        let tensors = (0..groups.group_size()).map(|_| LayerKv::zeros(dtype, head_dim, row_len, num_slots)).collect();
        Ok(Self { tensors, groups, num_blocks, block_size, row_len, head_dim, dtype, key_offsets: Vec::new() })
    }

    /// Pages that fit in `budget_bytes`, so callers size the pool from memory, not a guess.
    pub fn blocks_for_budget(config: &ModelConfig, block_size: usize, budget_bytes: usize, dtype: KvDtype) -> usize {
        budget_bytes / (Self::bytes_per_slot(config, dtype) * block_size).max(1)
    }

    /// K and V of one slot of a page (the layers of one group, one position), stored as `dtype`.
    pub fn bytes_per_slot(config: &ModelConfig, dtype: KvDtype) -> usize {
        2 * KvGroups::for_model(config).group_size() * Self::row_bytes(config, dtype)
    }

    /// K and V bytes one row of attention reads at position `context - 1`: every layer's keys
    /// and values in its window.
    pub fn bytes_read_per_row(config: &ModelConfig, dtype: KvDtype, context: usize) -> usize {
        let keys: usize =
            (0..config.num_layers).map(|l| config.layer_window(l).map_or(context, |w| w.min(context))).sum();
        2 * keys * Self::row_bytes(config, dtype)
    }

    /// One layer's K (or V) of one position, scales included.
    fn row_bytes(config: &ModelConfig, dtype: KvDtype) -> usize {
        let values = config.num_kv_heads * config.head_dim;
        match dtype {
            KvDtype::F32 => 4 * values,
            KvDtype::F16 => 2 * values,
            KvDtype::Q8 => values + 2 * values / kv_q8::group_size(config.head_dim),
        }
    }

    pub fn groups(&self) -> &KvGroups {
        &self.groups
    }

    pub fn dtype(&self) -> KvDtype {
        self.dtype
    }

    /// Per layer, the constant a q8 cache subtracts from the layer's keys before quantizing
    /// (`kv_q8`; `row_len` values each, `None` for none); the other dtypes ignore it.
    pub fn with_key_offsets(mut self, key_offsets: Vec<Option<Arc<[f32]>>>) -> Self {
        self.key_offsets = key_offsets;
        self
    }

    fn key_offset(&self, layer: usize) -> Option<&Arc<[f32]>> {
        self.key_offsets.get(layer).and_then(Option::as_ref)
    }

    /// Layer `layer`'s K and V rows of a step in this cache's dtype (`LayerKv::from_rows`).
    pub fn step_rows(&self, layer: usize, k: Vec<f32>, v: Vec<f32>) -> LayerKv {
        let key_offset = self.key_offset(layer).filter(|_| self.dtype == KvDtype::Q8).cloned();
        LayerKv::from_rows(self.dtype, self.head_dim, self.row_len, k, v, key_offset)
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

    /// The tensor layer `layer` reads its pages from.
    pub fn layer(&self, layer: usize) -> &LayerKv {
        &self.tensors[self.groups.slot_of(layer)]
    }

    /// Persists the rows of `step` (`LayerKv::from_rows` in this cache's dtype) whose slot in
    /// the layer's group (`slot_mapping`) is not -1.
    pub fn store(&mut self, layer: usize, slot_mapping: &[i64], step: &LayerKv) -> Result<()> {
        let row_len = self.row_len;
        let kv = &mut self.tensors[self.groups.slot_of(layer)];
        for (row, &slot) in slot_mapping.iter().enumerate() {
            if slot >= 0 {
                kv.copy_slot(slot as usize, step, row, row_len)?;
            }
        }
        Ok(())
    }

    /// Copies whole pages `(src, dst)` in every tensor: a forked sequence's copy of its
    /// parent's partial last block, made before the forward that first writes it.
    pub fn copy_blocks(&mut self, copies: &[(usize, usize)]) -> Result<()> {
        for &(src, dst) in copies {
            if src >= self.num_blocks || dst >= self.num_blocks || src == dst {
                return Err(ModelError::KvCache(format!(
                    "cannot copy page {src} to page {dst} of {}",
                    self.num_blocks
                )));
            }
            for kv in &mut self.tensors {
                kv.copy_slots_within(src * self.block_size, dst * self.block_size, self.block_size, self.row_len);
            }
        }
        Ok(())
    }

    /// K and V of one slot in one layer (tests compare committed K/V against a fresh prefill).
    pub fn read_slot(&self, layer: usize, slot: usize) -> (Vec<f32>, Vec<f32>) {
        let (mut k, v) = self.layer(layer).read(slot, 1, self.row_len);
        if let Some(offset) = self.key_offset(layer).filter(|_| self.dtype == KvDtype::Q8) {
            k.iter_mut().zip(offset.iter()).for_each(|(x, c)| *x += c);
        }
        (k, v)
    }
}
