use half::f16;
use half::vec::HalfBitsVecExt;

use crate::config::ModelConfig;
use crate::error::{ModelError, Result};
use crate::kv_groups::KvGroups;
use crate::kv_q8::{self, Q8Values};

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
}

/// K and V rows in the cache's dtype (both always of the same one): one layer of the cache,
/// or one step's new rows, converted once so that the cache stores them and attention reads
/// them without another conversion.
pub enum LayerKv {
    F32(KvValues<f32>),
    F16(KvValues<f16>),
    Q8(Q8Values),
}

pub struct KvValues<T> {
    pub k: Vec<T>,
    pub v: Vec<T>,
}

impl<T: Copy> KvValues<T> {
    fn copy_within(&mut self, from: usize, to: usize, len: usize) {
        self.k.copy_within(from..from + len, to);
        self.v.copy_within(from..from + len, to);
    }

    fn copy_from(&mut self, to: usize, src: &KvValues<T>, from: usize, len: usize) {
        self.k[to..to + len].copy_from_slice(&src.k[from..from + len]);
        self.v[to..to + len].copy_from_slice(&src.v[from..from + len]);
    }
}

impl LayerKv {
    fn zeros(dtype: KvDtype, head_dim: usize, len: usize) -> Self {
        match dtype {
            KvDtype::F32 => LayerKv::F32(KvValues { k: vec![0.0; len], v: vec![0.0; len] }),
            // Zero bits from the allocator (as `vec![0.0; len]` gets for f32): pages the pool
            // never uses are never written, where `vec![f16::ZERO; len]` wrote all of them at
            // start-up.
            KvDtype::F16 => {
                LayerKv::F16(KvValues { k: vec![0u16; len].reinterpret_into(), v: vec![0u16; len].reinterpret_into() })
            }
            KvDtype::Q8 => LayerKv::Q8(Q8Values::zeros(len, kv_q8::group_size(head_dim))),
        }
    }

    /// A step's K and V rows (`[rows, kv_heads * head_dim]` f32) in `dtype`. f16 and q8 round
    /// each value once, here, so a key reads the same from this step as from the cache later.
    pub fn from_rows(dtype: KvDtype, head_dim: usize, k: Vec<f32>, v: Vec<f32>) -> Self {
        match dtype {
            KvDtype::F32 => LayerKv::F32(KvValues { k, v }),
            KvDtype::F16 => {
                let narrow = |x: &[f32]| x.iter().map(|&x| f16::from_f32(x)).collect();
                LayerKv::F16(KvValues { k: narrow(&k), v: narrow(&v) })
            }
            KvDtype::Q8 => LayerKv::Q8(Q8Values::quantize(&k, &v, kv_q8::group_size(head_dim))),
        }
    }

    pub fn dtype(&self) -> KvDtype {
        match self {
            LayerKv::F32(_) => KvDtype::F32,
            LayerKv::F16(_) => KvDtype::F16,
            LayerKv::Q8(_) => KvDtype::Q8,
        }
    }

    /// Copies `len` values of `src` from `from` to `to` in `self`; both of one dtype.
    fn copy_from(&mut self, to: usize, src: &LayerKv, from: usize, len: usize) -> Result<()> {
        match (self, src) {
            (LayerKv::F32(d), LayerKv::F32(s)) => d.copy_from(to, s, from, len),
            (LayerKv::F16(d), LayerKv::F16(s)) => d.copy_from(to, s, from, len),
            (LayerKv::Q8(d), LayerKv::Q8(s)) => d.copy_from(to, s, from, len),
            (d, s) => {
                return Err(ModelError::KvCache(format!("{:?} rows written to a {:?} cache", s.dtype(), d.dtype())))
            }
        }
        Ok(())
    }

    /// Copies `len` values from `from` to `to` within this tensor (whole q8 groups).
    fn copy_within(&mut self, from: usize, to: usize, len: usize) {
        match self {
            LayerKv::F32(kv) => kv.copy_within(from, to, len),
            LayerKv::F16(kv) => kv.copy_within(from, to, len),
            LayerKv::Q8(kv) => kv.copy_within(from, to, len),
        }
    }

    /// `len` K and V values from `at`, as f32 (for q8, whole groups: a slot's row is).
    pub fn read(&self, at: usize, len: usize) -> (Vec<f32>, Vec<f32>) {
        match self {
            LayerKv::F32(kv) => (kv.k[at..at + len].to_vec(), kv.v[at..at + len].to_vec()),
            LayerKv::F16(kv) => {
                let widen = |d: &[f16]| d.iter().map(|x| x.to_f32()).collect();
                (widen(&kv.k[at..at + len]), widen(&kv.v[at..at + len]))
            }
            LayerKv::Q8(kv) => kv.dequantize(at, len),
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
        let len = num_blocks * block_size * row_len;
        let groups = KvGroups::for_model(config);
        let head_dim = config.head_dim;
        let tensors = (0..groups.group_size()).map(|_| LayerKv::zeros(dtype, head_dim, len)).collect();
        Ok(Self { tensors, groups, num_blocks, block_size, row_len, head_dim, dtype })
    }

    /// Pages that fit in `budget_bytes`, so callers size the pool from memory, not a guess.
    pub fn blocks_for_budget(config: &ModelConfig, block_size: usize, budget_bytes: usize, dtype: KvDtype) -> usize {
        budget_bytes / (Self::bytes_per_slot(config, dtype) * block_size).max(1)
    }

    /// K and V of one slot of a page (the layers of one group, one position), stored as `dtype`.
    pub fn bytes_per_slot(config: &ModelConfig, dtype: KvDtype) -> usize {
        let values = config.num_kv_heads * config.head_dim;
        let row_bytes = match dtype {
            KvDtype::F32 => 4 * values,
            KvDtype::F16 => 2 * values,
            KvDtype::Q8 => values + 2 * values / kv_q8::group_size(config.head_dim),
        };
        2 * KvGroups::for_model(config).group_size() * row_bytes
    }

    pub fn groups(&self) -> &KvGroups {
        &self.groups
    }

    pub fn dtype(&self) -> KvDtype {
        self.dtype
    }

    /// A step's K and V rows in this cache's dtype (`LayerKv::from_rows`).
    pub fn step_rows(&self, k: Vec<f32>, v: Vec<f32>) -> LayerKv {
        LayerKv::from_rows(self.dtype, self.head_dim, k, v)
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
                kv.copy_from(slot as usize * row_len, step, row * row_len, row_len)?;
            }
        }
        Ok(())
    }

    /// Copies whole pages `(src, dst)` in every tensor: a forked sequence's copy of its
    /// parent's partial last block, made before the forward that first writes it.
    pub fn copy_blocks(&mut self, copies: &[(usize, usize)]) -> Result<()> {
        let page = self.block_size * self.row_len;
        for &(src, dst) in copies {
            if src >= self.num_blocks || dst >= self.num_blocks || src == dst {
                return Err(ModelError::KvCache(format!(
                    "cannot copy page {src} to page {dst} of {}",
                    self.num_blocks
                )));
            }
            for kv in &mut self.tensors {
                kv.copy_within(src * page, dst * page, page);
            }
        }
        Ok(())
    }

    /// K and V of one slot in one layer (tests compare committed K/V against a fresh prefill).
    pub fn read_slot(&self, layer: usize, slot: usize) -> (Vec<f32>, Vec<f32>) {
        self.layer(layer).read(slot * self.row_len, self.row_len)
    }
}
