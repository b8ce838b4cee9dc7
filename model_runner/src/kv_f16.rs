//! The f16 cache's slots in the interleaved layout (`kv_layout`): within a chunk of 16 slots and
//! a KV head, value `d` of the 16 keys lies side by side (`k_at`), so `attention_f16` widens 16
//! keys' value `d` with one conversion and multiplies it by query value `d` of every head that
//! shares the KV head; value rows stay one per slot.

use half::f16;
use half::vec::HalfBitsVecExt;

use crate::attention_runs::{prefetch, PagedRows};
use crate::kv_layout::SLOT_CHUNK;

/// K and V of a run of slots (a layer's pages, or one step's rows with row `i` in slot `i`).
pub struct F16Slots {
    pub k: Vec<f16>,
    pub v: Vec<f16>,
    pub head_dim: usize,
    /// Values per slot (KV heads x `head_dim`).
    pub row_len: usize,
}

impl F16Slots {
    /// `num_slots` slots of zero bits from the allocator (pages the pool never uses are never
    /// touched).
    pub(crate) fn zeros(num_slots: usize, row_len: usize, head_dim: usize) -> Self {
        let len = num_slots.next_multiple_of(SLOT_CHUNK) * row_len;
        Self { k: vec![0u16; len].reinterpret_into(), v: vec![0u16; len].reinterpret_into(), head_dim, row_len }
    }

    /// Rounds rows of f32 K and V (`[rows, row_len]`) to f16, row `i` into slot `i`.
    pub fn from_rows(k: &[f32], v: &[f32], row_len: usize, head_dim: usize) -> Self {
        let rows = k.len() / row_len.max(1);
        let mut slots = Self::zeros(rows, row_len, head_dim);
        for slot in 0..rows {
            for kv_head in 0..row_len / head_dim {
                for d in 0..head_dim {
                    let to = slots.k_at(slot, kv_head, d);
                    slots.k[to] = f16::from_f32(k[slot * row_len + kv_head * head_dim + d]);
                }
            }
        }
        for (to, &x) in slots.v.iter_mut().zip(v) {
            *to = f16::from_f32(x);
        }
        slots
    }

    /// Where value `d` of KV head `kv_head` of `slot`'s key is.
    #[inline]
    pub fn k_at(&self, slot: usize, kv_head: usize, d: usize) -> usize {
        let (chunk, t) = (slot / SLOT_CHUNK, slot % SLOT_CHUNK);
        chunk * SLOT_CHUNK * self.row_len + kv_head * SLOT_CHUNK * self.head_dim + d * SLOT_CHUNK + t
    }

    /// Where value `d` of KV head `kv_head` of `slot`'s value row is.
    #[inline]
    pub fn v_at(&self, slot: usize, kv_head: usize, d: usize) -> usize {
        slot * self.row_len + kv_head * self.head_dim + d
    }

    /// Copies slot `from` of `src` into slot `to`.
    pub(crate) fn copy_slot(&mut self, to: usize, src: &F16Slots, from: usize) {
        for kv_head in 0..self.row_len / self.head_dim {
            for d in 0..self.head_dim {
                let at = self.k_at(to, kv_head, d);
                self.k[at] = src.k[src.k_at(from, kv_head, d)];
            }
        }
        let (a, b) = (self.v_at(to, 0, 0), src.v_at(from, 0, 0));
        self.v[a..a + self.row_len].copy_from_slice(&src.v[b..b + self.row_len]);
    }

    /// Copies `count` slots from `from` on to `to` on, within these slots (ranges apart).
    pub(crate) fn copy_slots_within(&mut self, from: usize, to: usize, count: usize) {
        for i in 0..count {
            for kv_head in 0..self.row_len / self.head_dim {
                for d in 0..self.head_dim {
                    let (a, b) = (self.k_at(to + i, kv_head, d), self.k_at(from + i, kv_head, d));
                    self.k[a] = self.k[b];
                }
            }
        }
        let (a, b) = (self.v_at(to, 0, 0), self.v_at(from, 0, 0));
        self.v.copy_within(b..b + count * self.row_len, a);
    }

    /// K and V of `count` slots from `first` on, as f32 rows.
    pub fn read(&self, first: usize, count: usize) -> (Vec<f32>, Vec<f32>) {
        let k = (first..first + count)
            .flat_map(|slot| {
                (0..self.row_len).map(move |i| self.k[self.k_at(slot, i / self.head_dim, i % self.head_dim)].to_f32())
            })
            .collect();
        let at = self.v_at(first, 0, 0);
        let v = self.v[at..at + count * self.row_len].iter().map(|x| x.to_f32()).collect();
        (k, v)
    }
}

impl PagedRows for F16Slots {
    fn prefetch_keys(&self, slot: usize, len: usize) {
        let chunks = slot / SLOT_CHUNK..(slot + len).div_ceil(SLOT_CHUNK);
        prefetch(&self.k, chunks.start * SLOT_CHUNK * self.row_len..chunks.end * SLOT_CHUNK * self.row_len);
    }

    fn prefetch_values(&self, slot: usize, len: usize) {
        prefetch(&self.v, slot * self.row_len..(slot + len) * self.row_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every slot's key values land in places of their own, and rows come back as written.
    #[test]
    fn slots_round_trip_through_the_interleaved_layout() {
        let (row_len, head_dim, rows) = (2 * 16, 16, 37);
        let k: Vec<f32> = (0..rows * row_len).map(|i| i as f32).collect();
        let v: Vec<f32> = k.iter().map(|x| -x).collect();
        let slots = F16Slots::from_rows(&k, &v, row_len, head_dim);
        assert_eq!(slots.read(0, rows), (k.clone(), v.clone()));
        let mut seen = vec![false; slots.k.len()];
        for slot in 0..rows {
            for i in 0..row_len {
                assert!(!std::mem::replace(&mut seen[slots.k_at(slot, i / head_dim, i % head_dim)], true));
            }
        }
        let mut copy = F16Slots::zeros(64, row_len, head_dim);
        copy.copy_slot(20, &slots, 3);
        copy.copy_slots_within(19, 40, 2);
        assert_eq!(copy.read(41, 1), slots.read(3, 1));
        assert_eq!(copy.read(40, 1).0, vec![0.0; row_len]);
    }
}
