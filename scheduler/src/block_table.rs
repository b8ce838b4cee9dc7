//! One KV cache group's blocks of a sequence, owned RAII-style: dropping the table hands every
//! block it holds back to the pool, so finish, abort, preemption and error paths cannot leak.

use crate::block::{BlockCopy, BlockId, NULL_BLOCK};
use crate::block_pool::BlockPool;
use crate::prefix_hash::{hash_block_tokens, BlockHash};

pub(crate) struct BlockTable {
    pool: BlockPool,
    group: usize,
    /// Keys a layer of this group attends to, its own included; `None`: all of them.
    window: Option<usize>,
    /// Indexed by position / block_size; `NULL_BLOCK` where a windowed group gave a block back.
    block_ids: Vec<BlockId>,
    /// Chain hashes of the leading full, computed blocks (released ones included, so the chain
    /// goes on); the next one hashes from the last.
    block_hashes: Vec<BlockHash>,
    /// Entries before this are all `NULL_BLOCK`.
    num_released: usize,
}

impl BlockTable {
    pub(crate) fn new(pool: BlockPool, group: usize, window: Option<usize>) -> Self {
        Self { pool, group, window, block_ids: Vec::new(), block_hashes: Vec::new(), num_released: 0 }
    }

    /// Starts a table on prefix-cache hits (`None`: a block before the window that the table
    /// never needs), taking a reference on each hit.
    pub(crate) fn with_cached_prefix(
        pool: BlockPool,
        group: usize,
        window: Option<usize>,
        hits: &[Option<BlockId>],
        hashes: &[BlockHash],
    ) -> Self {
        let block_ids: Vec<BlockId> = hits.iter().map(|hit| hit.unwrap_or(NULL_BLOCK)).collect();
        let held: Vec<BlockId> = hits.iter().flatten().copied().collect();
        pool.touch(&held);
        let num_released = block_ids.iter().take_while(|&&id| id == NULL_BLOCK).count();
        Self { pool, group, window, block_ids, block_hashes: hashes[..hits.len()].to_vec(), num_released }
    }

    /// Every entry, `NULL_BLOCK` for released ones.
    pub(crate) fn ids(&self) -> &[BlockId] {
        &self.block_ids
    }

    /// The blocks the table holds a reference on.
    pub(crate) fn held_ids(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.block_ids.iter().copied().filter(|&id| id != NULL_BLOCK)
    }

    /// KV slots the table covers (released ones included: they are behind every query).
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

    /// Gives back the blocks wholly past the first `num_slots` slots: where a rejected draft
    /// wrote its KV. Those tokens were never computed, so none of these blocks was hashed.
    pub(crate) fn truncate(&mut self, num_slots: usize) {
        let keep = num_slots.div_ceil(self.pool.block_size()).max(self.num_released);
        if keep >= self.block_ids.len() {
            return;
        }
        let freed: Vec<BlockId> = self.block_ids.drain(keep..).filter(|&id| id != NULL_BLOCK).collect();
        self.block_hashes.truncate(keep);
        self.pool.free(&freed);
    }

    /// A table for a sequence forked from this one once `num_computed` tokens are computed:
    /// every full block is shared (one more reference: a full computed block is never written
    /// again), and the partial last block is copied on write into a fresh block, returned as
    /// the copy the model runner must make before the child's next forward. `None`, with
    /// nothing taken, when the pool has no block for the copy.
    pub(crate) fn fork(&self, num_computed: usize) -> Option<(BlockTable, Option<BlockCopy>)> {
        let bs = self.pool.block_size();
        let num_full = (num_computed / bs).min(self.block_ids.len());
        let partial = if num_computed.is_multiple_of(bs) { None } else { self.block_ids.get(num_full).copied() };
        let copy = match partial.filter(|&id| id != NULL_BLOCK) {
            Some(src) => Some(BlockCopy { src, dst: *self.pool.allocate(1)?.first()? }),
            None => None,
        };
        let mut block_ids = self.block_ids[..num_full].to_vec();
        let shared: Vec<BlockId> = block_ids.iter().copied().filter(|&id| id != NULL_BLOCK).collect();
        self.pool.touch(&shared);
        block_ids.extend(copy.map(|c| c.dst));
        let child = BlockTable {
            pool: self.pool.clone(),
            group: self.group,
            window: self.window,
            block_ids,
            block_hashes: self.block_hashes[..self.block_hashes.len().min(num_full)].to_vec(),
            num_released: self.num_released.min(num_full),
        };
        Some((child, copy))
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
            if self.block_ids[i] != NULL_BLOCK {
                self.pool.cache_block(self.group, self.block_ids[i], hash, parent, chunk);
            }
            self.block_hashes.push(hash);
        }
    }

    /// Gives back the blocks whose every key lies before the window of the next token to
    /// compute (position `num_computed`); a no-op for a full-attention group. Call once the
    /// step that computed `num_computed` tokens is committed, after `cache_full_blocks`, so
    /// released blocks stay in the prefix cache until the pool reuses them.
    pub(crate) fn release_outside_window(&mut self, num_computed: usize) {
        let Some(first_needed) = self.window.map(|w| first_needed_block(num_computed, w, self.pool.block_size()))
        else {
            return;
        };
        let end = first_needed.min(self.block_ids.len());
        if end <= self.num_released {
            return;
        }
        let released: Vec<BlockId> =
            self.block_ids[self.num_released..end].iter().copied().filter(|&id| id != NULL_BLOCK).collect();
        self.block_ids[self.num_released..end].fill(NULL_BLOCK);
        self.num_released = end;
        self.pool.free(&released);
    }

    /// Flat KV slot of token `position`: `block_table[position / bs] * bs + position % bs`;
    /// `None` beyond the table or in a released block.
    pub(crate) fn slot(&self, position: usize) -> Option<i64> {
        let bs = self.pool.block_size();
        let block = *self.block_ids.get(position / bs)?;
        if block == NULL_BLOCK {
            return None;
        }
        i64::try_from(block as usize * bs + position % bs).ok()
    }
}

/// The first block a layer with a window of `window` keys still reads once `num_computed`
/// tokens are computed: the next token (position `num_computed`) attends to keys
/// `num_computed + 1 - window ..= num_computed`, and later tokens to later ones.
pub(crate) fn first_needed_block(num_computed: usize, window: usize, block_size: usize) -> usize {
    (num_computed + 1).saturating_sub(window) / block_size
}

impl Drop for BlockTable {
    fn drop(&mut self) {
        let held: Vec<BlockId> = self.held_ids().collect();
        self.pool.free(&held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_returns_blocks_and_growth_is_all_or_nothing() {
        let pool = BlockPool::new(3, 4, false);
        {
            let mut table = BlockTable::new(pool.clone(), 0, None);
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

    #[test]
    fn a_windowed_table_gives_back_exactly_the_blocks_behind_its_window() {
        let pool = BlockPool::new(8, 4, false);
        let mut table = BlockTable::new(pool.clone(), 1, Some(6));
        assert!(table.ensure_slots(20));
        // 13 computed: the next token (position 13) attends to keys 8..=13, in blocks 2 and 3.
        table.release_outside_window(13);
        assert_eq!(table.ids()[..2], [NULL_BLOCK, NULL_BLOCK]);
        assert!(table.ids()[2..].iter().all(|&id| id != NULL_BLOCK));
        assert_eq!(pool.num_free_blocks(), 8 - 3);
        assert_eq!((table.slot(7), table.slot(8).is_some()), (None, true));
        // Every key a later token attends to is still in the table.
        for next in 13..20 {
            for key in (next + 1 - 6)..=next {
                assert!(table.slot(key).is_some(), "key {key} of position {next}");
            }
        }
        table.release_outside_window(13);
        assert_eq!(pool.num_free_blocks(), 5, "releasing twice frees nothing twice");
        drop(table);
        assert_eq!(pool.num_free_blocks(), 8);
    }

    #[test]
    fn truncate_gives_back_only_the_blocks_wholly_past_the_kept_slots() {
        let pool = BlockPool::new(6, 4, false);
        let mut table = BlockTable::new(pool.clone(), 0, None);
        assert!(table.ensure_slots(20));
        let kept: Vec<BlockId> = table.ids()[..3].to_vec();
        table.truncate(9);
        assert_eq!(table.ids(), &kept[..], "slot 8 lives in the third block");
        assert_eq!(pool.num_free_blocks(), 3);
        table.truncate(12);
        assert_eq!(table.ids().len(), 3, "truncating to more than the table holds is a no-op");
        drop(table);
        assert_eq!(pool.num_free_blocks(), 6);
    }

    #[test]
    fn a_full_table_never_releases() {
        let pool = BlockPool::new(4, 4, false);
        let mut table = BlockTable::new(pool.clone(), 0, None);
        assert!(table.ensure_slots(16));
        table.release_outside_window(16);
        assert_eq!(pool.num_free_blocks(), 0);
    }
}
