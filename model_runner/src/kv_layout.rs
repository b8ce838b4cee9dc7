//! The slot layout the 8-bit and f16 caches share (`Q8Slots`, `F16Slots`): keys interleaved per
//! chunk of `SLOT_CHUNK` consecutive slots, so that one vector load holds the same values of one
//! KV head for 16 keys and a query head scores 16 keys per instruction without horizontal sums;
//! value rows stay one per slot, read whole once for every query head that shares them.

/// Slots interleaved together in the key layout (one 512-bit register of f32 lanes).
pub const SLOT_CHUNK: usize = 16;
