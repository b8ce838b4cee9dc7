//! Chained block hashes for the prefix cache.
//!
//! A block's hash covers its parent's hash and its own token ids, so equal hashes
//! mean equal prefixes up to and including that block (modulo 64-bit collisions,
//! which the block pool turns into misses by comparing the stored tokens).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockHash(pub u64);

/// `H(parent_hash, token_ids)`. `DefaultHasher::new()` uses fixed keys, so hashes are
/// stable within a process (not across Rust releases; they are never persisted).
pub fn hash_block_tokens(parent: Option<BlockHash>, token_ids: &[u32]) -> BlockHash {
    let mut hasher = DefaultHasher::new();
    parent.map(|h| h.0).hash(&mut hasher);
    token_ids.hash(&mut hasher);
    BlockHash(hasher.finish())
}

/// Prefix-cache effectiveness, counted in tokens at admission (vLLM's definition).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Tokens of admitted sequences that were looked up.
    pub queries: u64,
    /// Of those, tokens whose KV came from cached blocks.
    pub hits: u64,
}

impl PrefixCacheStats {
    pub fn hit_rate(&self) -> f64 {
        if self.queries == 0 {
            0.0
        } else {
            self.hits as f64 / self.queries as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_depends_on_parent_and_tokens() {
        let a = hash_block_tokens(None, &[1, 2, 3, 4]);
        assert_eq!(a, hash_block_tokens(None, &[1, 2, 3, 4]));
        assert_ne!(a, hash_block_tokens(None, &[1, 2, 3, 5]));
        assert_ne!(a, hash_block_tokens(Some(a), &[1, 2, 3, 4]));
        assert_ne!(hash_block_tokens(Some(BlockHash(1)), &[9]), hash_block_tokens(Some(BlockHash(2)), &[9]));
    }
}
