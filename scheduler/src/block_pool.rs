//! The shared pool of KV blocks (pages, one pool for every KV cache group): reference counts,
//! the free queue (LRU eviction order) and the prefix-cache map from (group, block hash) to
//! block.
//!
//! `BlockPool` is a cheap handle (`Arc<Mutex<..>>`) so each `BlockTable` can give its
//! blocks back from `Drop`, wherever the table dies.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::block::{Block, BlockId};
use crate::free_queue::FreeQueue;
use crate::prefix_hash::BlockHash;

#[derive(Clone)]
pub(crate) struct BlockPool {
    inner: Arc<Mutex<BlockPoolInner>>,
    block_size: usize,
    enable_prefix_caching: bool,
}

struct BlockPoolInner {
    blocks: Vec<Block>,
    /// Blocks with ref_count 0, cached or not; the front is evicted first.
    free: FreeQueue,
    cached: HashMap<(usize, BlockHash), BlockId>,
}

/// The prefix-cache map under the pool's lock (`BlockPool::prefix_cache`). Read-only: the
/// caller touches hits once admission succeeds.
pub(crate) struct PrefixCacheView<'a> {
    inner: MutexGuard<'a, BlockPoolInner>,
    enabled: bool,
}

impl PrefixCacheView<'_> {
    /// The block of `group` cached under `hash` for `token_ids` after the block `parent`.
    pub(crate) fn lookup(
        &self,
        group: usize,
        hash: BlockHash,
        parent: Option<BlockHash>,
        token_ids: &[u32],
    ) -> Option<BlockId> {
        if !self.enabled {
            return None;
        }
        let &id = self.inner.cached.get(&(group, hash))?;
        self.inner.blocks[id as usize].matches(group, parent, token_ids).then_some(id)
    }
}

impl BlockPool {
    pub(crate) fn new(num_blocks: usize, block_size: usize, enable_prefix_caching: bool) -> Self {
        let blocks = (0..num_blocks).map(|i| Block::new(i as BlockId)).collect();
        let inner = BlockPoolInner { blocks, free: FreeQueue::with_all(num_blocks), cached: HashMap::new() };
        Self { inner: Arc::new(Mutex::new(inner)), block_size, enable_prefix_caching }
    }

    pub(crate) fn block_size(&self) -> usize {
        self.block_size
    }

    pub(crate) fn prefix_caching_enabled(&self) -> bool {
        self.enable_prefix_caching
    }

    pub(crate) fn num_total_blocks(&self) -> usize {
        self.inner.lock().blocks.len()
    }

    /// Includes cached blocks nobody holds: they are evicted on demand.
    pub(crate) fn num_free_blocks(&self) -> usize {
        self.inner.lock().free.len()
    }

    pub(crate) fn num_cached_blocks(&self) -> usize {
        self.inner.lock().cached.len()
    }

    pub(crate) fn block(&self, id: BlockId) -> Option<Block> {
        self.inner.lock().blocks.get(id as usize).cloned()
    }

    /// The prefix cache, read under one lock for however many blocks a lookup walks (another
    /// thread's probe then holds up the loop once per prompt, not once per block).
    pub(crate) fn prefix_cache(&self) -> PrefixCacheView<'_> {
        PrefixCacheView { inner: self.inner.lock(), enabled: self.enable_prefix_caching }
    }

    /// How many of `ids` sit in the free queue, i.e. would stop being free when touched.
    pub(crate) fn num_evictable(&self, ids: &[BlockId]) -> usize {
        let inner = self.inner.lock();
        ids.iter().filter(|&&id| inner.blocks[id as usize].ref_count == 0).count()
    }

    /// Takes one more reference on each block, pulling unreferenced ones out of the free queue.
    pub(crate) fn touch(&self, ids: &[BlockId]) {
        let mut inner = self.inner.lock();
        for &id in ids {
            if inner.blocks[id as usize].ref_count == 0 {
                inner.free.remove(id);
            }
            inner.blocks[id as usize].ref_count += 1;
        }
    }

    /// `n` fresh blocks (ref_count 1), or `None` without side effects if the pool is short.
    pub(crate) fn allocate(&self, n: usize) -> Option<Vec<BlockId>> {
        let mut inner = self.inner.lock();
        if inner.free.len() < n {
            return None;
        }
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            let id = inner.free.pop_front()?;
            inner.evict(id);
            inner.blocks[id as usize].ref_count = 1;
            ids.push(id);
        }
        Some(ids)
    }

    /// Drops one reference per block. A block that no cache entry points to holds nothing
    /// worth keeping once free (a partial tail, a rolled-back draft's block, a block never
    /// filled): it goes to the front of the queue, so it is reused before any cached prefix
    /// is evicted, and the pages in use stay the recently used ones instead of the pool
    /// cycling through all its memory. Cached blocks go to the back, in LRU order, the table
    /// walked backwards so a sequence's tail is evicted before its shared prefix.
    pub(crate) fn free(&self, ids: &[BlockId]) {
        let mut inner = self.inner.lock();
        for &id in ids.iter().rev() {
            let block = &mut inner.blocks[id as usize];
            if block.ref_count == 0 {
                tracing::error!(block = id, "double free of a KV block ignored");
                continue;
            }
            block.ref_count -= 1;
            if block.ref_count == 0 {
                if block.hash.is_some() {
                    inner.free.push_back(id);
                } else {
                    inner.free.push_front(id);
                }
            }
        }
    }

    /// Registers a full, computed block of `group` under `hash`. If another block already holds
    /// that hash (same prefix computed twice, or a collision) this one stays uncached.
    pub(crate) fn cache_block(
        &self,
        group: usize,
        id: BlockId,
        hash: BlockHash,
        parent: Option<BlockHash>,
        token_ids: &[u32],
    ) {
        if !self.enable_prefix_caching {
            return;
        }
        let mut inner = self.inner.lock();
        if inner.cached.contains_key(&(group, hash)) || inner.blocks[id as usize].hash.is_some() {
            return;
        }
        inner.blocks[id as usize].set_cached(group, hash, parent, token_ids);
        inner.cached.insert((group, hash), id);
    }

    /// Checks the pool against `holders` (block id -> number of live tables holding it).
    pub(crate) fn check(&self, holders: &HashMap<BlockId, usize>) -> Result<(), String> {
        let inner = self.inner.lock();
        for block in &inner.blocks {
            let held = holders.get(&block.id).copied().unwrap_or(0);
            if block.ref_count != held {
                return Err(format!("block {} ref_count {} but {} tables hold it", block.id, block.ref_count, held));
            }
            if (block.ref_count == 0) != inner.free.contains(block.id) {
                return Err(format!("block {} ref_count {} vs free-queue membership", block.id, block.ref_count));
            }
            if let Some(hash) = block.hash {
                if inner.cached.get(&(block.group, hash)) != Some(&block.id) {
                    return Err(format!("block {} has a hash the cache map does not point back to", block.id));
                }
            }
        }
        if inner.free.iter().count() != inner.free.len() {
            return Err("free queue length does not match its links".into());
        }
        for (&(group, hash), &id) in &inner.cached {
            if inner.blocks.get(id as usize).map(|b| (b.group, b.hash)) != Some((group, Some(hash))) {
                return Err(format!("cache entry for block {id} is stale"));
            }
        }
        Ok(())
    }
}

impl BlockPoolInner {
    /// A block leaving the free queue for reuse loses its cached identity.
    fn evict(&mut self, id: BlockId) {
        let group = self.blocks[id as usize].group;
        if let Some(hash) = self.blocks[id as usize].hash {
            if self.cached.get(&(group, hash)) == Some(&id) {
                self.cached.remove(&(group, hash));
            }
            self.blocks[id as usize].clear_cached();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefix_hash::hash_block_tokens;

    #[test]
    fn collision_is_a_miss() {
        let pool = BlockPool::new(4, 2, true);
        let ids = pool.allocate(1).unwrap();
        // Pretend block 0 holds [7, 8] but is filed under the hash of [1, 2].
        let forged = hash_block_tokens(None, &[1, 2]);
        pool.cache_block(0, ids[0], forged, None, &[7, 8]);
        assert_eq!(pool.prefix_cache().lookup(0, forged, None, &[1, 2]), None);
        let real = hash_block_tokens(None, &[7, 8]);
        assert_eq!(pool.prefix_cache().lookup(0, real, None, &[7, 8]), None, "filed under the wrong key");
        let other = pool.allocate(1).unwrap();
        pool.cache_block(0, other[0], real, None, &[7, 8]);
        assert_eq!(pool.prefix_cache().lookup(0, real, None, &[7, 8]), Some(other[0]));
        assert_eq!(pool.prefix_cache().lookup(1, real, None, &[7, 8]), None, "another group's layers");
    }

    #[test]
    fn eviction_drops_hash_only_on_reuse() {
        let pool = BlockPool::new(2, 2, true);
        let ids = pool.allocate(2).unwrap();
        let h = hash_block_tokens(None, &[1, 2]);
        pool.cache_block(0, ids[0], h, None, &[1, 2]);
        pool.free(&ids);
        assert_eq!(pool.num_free_blocks(), 2);
        assert_eq!(pool.num_cached_blocks(), 1);
        // Reverse-order free: the uncached tail (ids[1]) is evicted first.
        let a = pool.allocate(1).unwrap();
        assert_eq!(a, vec![ids[1]]);
        assert_eq!(pool.num_cached_blocks(), 1);
        let b = pool.allocate(1).unwrap();
        assert_eq!(b, vec![ids[0]]);
        assert_eq!(pool.num_cached_blocks(), 0);
        assert_eq!(pool.block(ids[0]).unwrap().hash(), None);
        assert!(pool.allocate(1).is_none());
    }

    #[test]
    fn a_free_block_holding_nothing_is_reused_before_a_cached_one_is_evicted() {
        let pool = BlockPool::new(4, 2, true);
        let (first, second) = (pool.allocate(2).unwrap(), pool.allocate(1).unwrap());
        let (h1, h2) = (hash_block_tokens(None, &[1, 2]), hash_block_tokens(None, &[3, 4]));
        pool.cache_block(0, first[0], h1, None, &[1, 2]);
        pool.cache_block(0, second[0], h2, None, &[3, 4]);
        pool.free(&second);
        // The older request ends later; its uncached tail is the block to give out first.
        pool.free(&first);
        let again = pool.allocate(2).unwrap();
        assert_eq!(again[0], first[1], "the freed uncached block is reused at once");
        assert_eq!(pool.num_cached_blocks(), 2, "no cached block evicted while an empty one was free");
        assert_eq!(pool.prefix_cache().lookup(0, h1, None, &[1, 2]), Some(first[0]));
        assert_eq!(pool.prefix_cache().lookup(0, h2, None, &[3, 4]), Some(second[0]));
    }
}
