//! A sequence's blocks, owned RAII-style: dropping the table hands every block back
//! to the pool, so finish, abort, preemption and error paths cannot leak.

use crate::block::BlockId;
use crate::block_pool::BlockPool;
use crate::prefix_hash::{hash_block_tokens, BlockHash};

pub(crate) struct BlockTable {
    pool: BlockPool,
    block_ids: Vec<BlockId>,
    /// Chain hashes of the leading full, computed blocks; the next one hashes from the last.
    block_hashes: Vec<BlockHash>,
}

impl BlockTable {
    pub(crate) fn new(pool: BlockPool) -> Self {
        Self { pool, block_ids: Vec::new(), block_hashes: Vec::new() }
    }

    /// Starts a table on prefix-cache hits, taking a reference on each.
    pub(crate) fn with_cached_prefix(pool: BlockPool, hits: &[(BlockId, BlockHash)]) -> Self {
        let block_ids: Vec<BlockId> = hits.iter().map(|&(id, _)| id).collect();
        pool.touch(&block_ids);
        let block_hashes = hits.iter().map(|&(_, hash)| hash).collect();
        Self { pool, block_ids, block_hashes }
    }

    pub(crate) fn ids(&self) -> &[BlockId] {
        &self.block_ids
    }

    /// KV slots the table covers.
    pub(crate) fn num_slots(&self) -> usize {
        self.block_ids.len() * self.pool.block_size()
    }

    /// Grows the table to cover `num_slots`; all or nothing.
    pub(crate) fn ensure_slots(&mut self, num_slots: usize) -> bool {
        let needed = num_slots.div_ceil(self.pool.block_size());
        let missing = needed.saturating_sub(self.block_ids.len());
        if missing == 0 {
            return true;
        }
        match self.pool.allocate(missing) {
            Some(ids) => {
                self.block_ids.extend(ids);
                true
            }
            None => false,
        }
    }

    /// Registers every block that is full of computed tokens and not yet hashed.
    /// Called only once the KV of `token_ids[..num_computed]` is really in the cache.
    pub(crate) fn cache_full_blocks(&mut self, token_ids: &[u32], num_computed: usize) {
        if !self.pool.prefix_caching_enabled() {
            return;
        }
        let bs = self.pool.block_size();
        let num_full = (num_computed.min(token_ids.len()) / bs).min(self.block_ids.len());
        for i in self.block_hashes.len()..num_full {
            let chunk = &token_ids[i * bs..(i + 1) * bs];
            let parent = self.block_hashes.last().copied();
            let hash = hash_block_tokens(parent, chunk);
            self.pool.cache_block(self.block_ids[i], hash, parent, chunk);
            self.block_hashes.push(hash);
        }
    }

    /// Flat KV slot of token `position`: `block_table[position / bs] * bs + position % bs`.
    pub(crate) fn slot(&self, position: usize) -> Option<i64> {
        let bs = self.pool.block_size();
        let block = *self.block_ids.get(position / bs)?;
        i64::try_from(block as usize * bs + position % bs).ok()
    }
}

impl Drop for BlockTable {
    fn drop(&mut self) {
        self.pool.free(&self.block_ids);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_returns_blocks_and_growth_is_all_or_nothing() {
        let pool = BlockPool::new(3, 4, false);
        {
            let mut table = BlockTable::new(pool.clone());
            assert!(table.ensure_slots(9));
            assert_eq!(table.ids().len(), 3);
            assert_eq!(table.slot(5), Some(table.ids()[1] as i64 * 4 + 1));
            assert_eq!(table.slot(12), None);
            assert!(!table.ensure_slots(13));
            assert_eq!(table.ids().len(), 3);
            assert_eq!(pool.num_free_blocks(), 0);
        }
        assert_eq!(pool.num_free_blocks(), 3);
    }
}
