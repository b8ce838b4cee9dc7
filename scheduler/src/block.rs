//! One physical KV block.

use crate::prefix_hash::BlockHash;

/// Index of a physical block in the KV cache.
pub type BlockId = u32;

/// A block-table entry whose block a windowed group gave back (it lies before every key the
/// sequence will attend to again); never a real block, since `SchedulerConfig::validate` keeps
/// `num_blocks` within `u32::MAX`.
pub const NULL_BLOCK: BlockId = u32::MAX;

/// A block's K/V to copy into another before the next forward: a fork's copy-on-write of the
/// partial last block (`Scheduler::fork`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockCopy {
    pub src: BlockId,
    pub dst: BlockId,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub(crate) id: BlockId,
    /// Number of block tables holding this block.
    pub(crate) ref_count: usize,
    /// The KV cache group whose layers' K/V the block held when it was cached.
    pub(crate) group: usize,
    /// Set while the block is registered in the prefix cache; survives ref_count 0
    /// until the pool reuses the block.
    pub(crate) hash: Option<BlockHash>,
    /// What `hash` was computed from, so a hash collision reads as a miss instead
    /// of handing out another prefix's KV.
    pub(crate) parent_hash: Option<BlockHash>,
    pub(crate) token_ids: Vec<u32>,
}

impl Block {
    pub(crate) fn new(id: BlockId) -> Self {
        Self { id, ref_count: 0, group: 0, hash: None, parent_hash: None, token_ids: Vec::new() }
    }

    pub fn id(&self) -> BlockId {
        self.id
    }

    pub fn ref_count(&self) -> usize {
        self.ref_count
    }

    pub fn hash(&self) -> Option<BlockHash> {
        self.hash
    }

    /// Token ids the cached hash was computed from (empty when not cached).
    pub fn cached_token_ids(&self) -> &[u32] {
        &self.token_ids
    }

    pub(crate) fn matches(&self, group: usize, parent: Option<BlockHash>, token_ids: &[u32]) -> bool {
        self.hash.is_some() && self.group == group && self.parent_hash == parent && self.token_ids == token_ids
    }

    pub(crate) fn set_cached(&mut self, group: usize, hash: BlockHash, parent: Option<BlockHash>, token_ids: &[u32]) {
        self.group = group;
        self.hash = Some(hash);
        self.parent_hash = parent;
        self.token_ids = token_ids.to_vec();
    }

    pub(crate) fn clear_cached(&mut self) {
        self.hash = None;
        self.parent_hash = None;
        self.token_ids.clear();
    }
}
