//! The prefix-cache hit of a sequence across KV cache groups.
//!
//! A full-attention group needs every block before the hit point; a windowed group only those
//! its next token attends to (vLLM's sliding-window manager). A hit length valid for a windowed
//! group need not be valid at a shorter length (the window moves back onto blocks that may be
//! gone), so the length is lowered until every group holds what it needs there.

use crate::block::BlockId;
use crate::block_pool::BlockPool;
use crate::block_table::first_needed_block;
use crate::prefix_hash::{hash_block_tokens, BlockHash};

/// The prefix cache as another thread sees it: how much of a prompt is cached now. Admission
/// estimates a request's own prefill from it on the submitting thread; the hit may be evicted
/// before the request is admitted, so it is an estimate, never a promise.
#[derive(Clone)]
pub struct PrefixProbe {
    pool: BlockPool,
    windows: Vec<Option<usize>>,
}

impl PrefixProbe {
    pub(crate) fn new(pool: BlockPool, windows: Vec<Option<usize>>) -> Self {
        Self { pool, windows }
    }

    /// Leading tokens of `token_ids` whose KV is cached (whole blocks; never the last token,
    /// which is always computed for its logits, as at admission).
    pub fn cached_tokens(&self, token_ids: &[u32]) -> usize {
        let bs = self.pool.block_size();
        PrefixHit::find(&self.pool, &self.windows, token_ids, cacheable_blocks(token_ids.len(), bs)).num_blocks * bs
    }
}

/// Full blocks of a sequence of `len` tokens a prefix-cache hit may cover: the last token is
/// always computed, since its logits are needed.
pub(crate) fn cacheable_blocks(len: usize, block_size: usize) -> usize {
    len.saturating_sub(1) / block_size
}

#[derive(Debug, Default)]
pub(crate) struct PrefixHit {
    /// Leading full blocks of the sequence whose KV every group has cached.
    pub(crate) num_blocks: usize,
    /// Per group, `num_blocks` entries: the cached block, or `None` for one before the window.
    pub(crate) blocks: Vec<Vec<Option<BlockId>>>,
    /// Chain hashes of the `num_blocks` blocks.
    pub(crate) hashes: Vec<BlockHash>,
}

impl PrefixHit {
    /// The longest hit over at most the first `max_blocks` full blocks of `token_ids`.
    pub(crate) fn find(pool: &BlockPool, windows: &[Option<usize>], token_ids: &[u32], max_blocks: usize) -> Self {
        let empty = || Self { num_blocks: 0, blocks: vec![Vec::new(); windows.len()], hashes: Vec::new() };
        if !pool.prefix_caching_enabled() || max_blocks == 0 {
            return empty();
        }
        let bs = pool.block_size();
        let mut hashes: Vec<BlockHash> = Vec::new();
        for chunk in token_ids.chunks_exact(bs).take(max_blocks) {
            hashes.push(hash_block_tokens(hashes.last().copied(), chunk));
        }
        let cache = pool.prefix_cache();
        let lookup = |g: usize, i: usize| {
            let parent = i.checked_sub(1).map(|p| hashes[p]);
            cache.lookup(g, hashes[i], parent, &token_ids[i * bs..(i + 1) * bs])
        };
        // Full groups first, each stopping at its first miss: no hit reaches past it.
        let mut n = hashes.len();
        let mut hits: Vec<Vec<Option<BlockId>>> = vec![Vec::new(); windows.len()];
        for (g, _) in windows.iter().enumerate().filter(|(_, w)| w.is_none()) {
            hits[g] = (0..n).map(|i| lookup(g, i)).take_while(Option::is_some).collect();
            n = hits[g].len();
        }
        for (g, _) in windows.iter().enumerate().filter(|(_, w)| w.is_some()) {
            hits[g] = (0..n).map(|i| lookup(g, i)).collect();
        }
        drop(cache);
        let covers = |g: usize, w: usize, n: usize| {
            hits[g][first_needed_block(n * bs, w, bs).min(n)..n].iter().all(Option::is_some)
        };
        loop {
            let before = n;
            for (g, w) in windows.iter().enumerate() {
                if let Some(w) = *w {
                    while n > 0 && !covers(g, w, n) {
                        n -= 1;
                    }
                }
            }
            if n == before {
                break;
            }
        }
        if n == 0 {
            return empty();
        }
        let blocks = windows
            .iter()
            .enumerate()
            .map(|(g, w)| {
                let first = w.map_or(0, |w| first_needed_block(n * bs, w, bs));
                (0..n).map(|i| if i < first { None } else { hits[g][i] }).collect()
            })
            .collect();
        hashes.truncate(n);
        Self { num_blocks: n, blocks, hashes }
    }

    /// Every block the hit would take a reference on.
    pub(crate) fn held_ids(&self) -> Vec<BlockId> {
        self.blocks.iter().flatten().flatten().copied().collect()
    }
}
