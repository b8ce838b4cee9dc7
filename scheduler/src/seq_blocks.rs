//! A sequence's KV blocks: one `BlockTable` per KV cache group, grown, hashed, released and
//! given back together.

use crate::block::{BlockCopy, BlockId};
use crate::block_pool::BlockPool;
use crate::block_table::BlockTable;
use crate::prefix_hit::PrefixHit;

pub(crate) struct SeqBlocks {
    tables: Vec<BlockTable>,
}

impl SeqBlocks {
    /// Empty tables, one per group of `windows` (`None`: full attention).
    pub(crate) fn new(pool: &BlockPool, windows: &[Option<usize>]) -> Self {
        let tables = windows.iter().enumerate().map(|(g, &w)| BlockTable::new(pool.clone(), g, w)).collect();
        Self { tables }
    }

    /// Tables starting on the cached blocks of `hit`.
    pub(crate) fn from_prefix_hit(pool: &BlockPool, windows: &[Option<usize>], hit: &PrefixHit) -> Self {
        let tables = windows
            .iter()
            .zip(&hit.blocks)
            .enumerate()
            .map(|(g, (&w, blocks))| BlockTable::with_cached_prefix(pool.clone(), g, w, blocks, &hit.hashes))
            .collect();
        Self { tables }
    }

    /// Grows every group's table to cover `num_slots`; false if the pool ran short (tables
    /// that grew keep their blocks, which the next try or the drop uses).
    pub(crate) fn ensure_slots(&mut self, num_slots: usize) -> bool {
        self.tables.iter_mut().all(|t| t.ensure_slots(num_slots))
    }

    /// Every group's table forked at `num_computed` tokens (`BlockTable::fork`), with the
    /// copies to make; `None`, with nothing held, when the pool is short.
    pub(crate) fn fork(&self, num_computed: usize) -> Option<(SeqBlocks, Vec<BlockCopy>)> {
        let mut tables = Vec::with_capacity(self.tables.len());
        let mut copies = Vec::new();
        for table in &self.tables {
            let (child, copy) = table.fork(num_computed)?;
            tables.push(child);
            copies.extend(copy);
        }
        Some((SeqBlocks { tables }, copies))
    }

    pub(crate) fn cache_full_blocks(&mut self, token_ids: &[u32], num_computed: usize) {
        for table in &mut self.tables {
            table.cache_full_blocks(token_ids, num_computed);
        }
    }

    pub(crate) fn release_outside_window(&mut self, num_computed: usize) {
        for table in &mut self.tables {
            table.release_outside_window(num_computed);
        }
    }

    /// Every group's table gives back the blocks wholly past `num_slots`.
    pub(crate) fn truncate(&mut self, num_slots: usize) {
        for table in &mut self.tables {
            table.truncate(num_slots);
        }
    }

    pub(crate) fn tables(&self) -> &[BlockTable] {
        &self.tables
    }

    pub(crate) fn ids(&self, group: usize) -> &[BlockId] {
        self.tables.get(group).map_or(&[], |t| t.ids())
    }

    pub(crate) fn slot(&self, group: usize, position: usize) -> Option<i64> {
        self.tables.get(group)?.slot(position)
    }

    /// Slots every group covers.
    pub(crate) fn num_slots(&self) -> usize {
        self.tables.iter().map(BlockTable::num_slots).min().unwrap_or(0)
    }
}
