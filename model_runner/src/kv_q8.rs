//! The 8-bit KV cache format: each K and V row is stored as int8 values with one f16 scale per
//! group of `Q8_GROUP` values of a head (llama.cpp's `q8_0` layout, so the two engines' 8-bit
//! caches keep the same information and a comparison of them compares kernels). A value is
//! `scale * q` with `q` in -127..=127 and `scale = max |x| / 127` over its group, rounded once
//! when a step's rows are written.
//!
//! Why a group per token and head rather than per channel (KIVI): a per-channel key scale
//! spans many tokens, so it is known only once a group of tokens exists (KIVI keeps the newest
//! tokens in full precision until then), and a row written by one step could change with the
//! rows after it, which prefix caching and batch invariance both forbid. Per-channel scales pay
//! off at 2-4 bits, where a few outlier channels would take the whole range; at 8 bits a group
//! of 32 keeps an outlier's damage inside its own 32 values.
//!
//! A head whose width is not a multiple of 32 (tiny test models) has one group per head.
//!
//! Keys may carry a constant part that no group can quantize well: Qwen2's key biases reach
//! 145-158 in the slowest-turning RoPE pairs of its first layers, beside values of 1-5 in the
//! rest of the group, so the group's step is about 1.2 and the small values are mostly lost.
//! A layer's `key_offset` (the mean of its rotated key bias over every position,
//! `Rope::mean_rotation`) is subtracted from each key before quantizing, and attention adds the
//! query's product with it back to every score (`attention_q8`): the same constant for every key
//! of a query, so the scores are the keys' own and the small values keep their precision.

use std::sync::Arc;

use half::f16;
use half::vec::HalfBitsVecExt;

use crate::attention_runs::{prefetch, PagedRows};
use crate::kv_layout::SLOT_CHUNK;

/// Values per scale where a head's width allows it.
pub const Q8_GROUP: usize = 32;

/// Values per scale for heads of `head_dim`.
pub fn group_size(head_dim: usize) -> usize {
    if head_dim.is_multiple_of(Q8_GROUP) {
        Q8_GROUP
    } else {
        head_dim
    }
}

/// K and V of a run of slots (a layer's pages, or one step's rows with row `i` in slot `i`) as
/// int8 with their f16 scales, laid out for `attention_q8`:
/// - keys are interleaved per chunk of `SLOT_CHUNK` slots: within a chunk and a KV head, the
///   four values `4i..4i + 4` of the chunk's 16 slots lie side by side (`k_at`), so the integer
///   dot products of 16 keys with one query come out one key per 32-bit lane of `vpdpbusd`,
///   with the query's four values broadcast and no horizontal sums;
/// - values stay one row per slot (`v_at`): the value sum reads a key's row whole, once for
///   every query head that shares it;
/// - the scales of both are interleaved per chunk (`scale_at`): 16 slots' scales of one group
///   are one load.
///
/// A page of a block size that is not a multiple of 16 shares a chunk with its neighbours;
/// slot-wise copies keep that correct.
pub struct Q8Slots {
    pub k: Vec<i8>,
    pub v: Vec<i8>,
    pub k_scales: Vec<f16>,
    pub v_scales: Vec<f16>,
    /// Values per scale.
    pub group: usize,
    pub head_dim: usize,
    /// Values per slot (KV heads x `head_dim`).
    pub row_len: usize,
    /// What was subtracted from every key before quantizing (`row_len` values; the module doc
    /// says why). Set on a step's rows; the cache's pages, shared by layers of different
    /// offsets, hold residuals whose layer the caller knows.
    pub key_offset: Option<Arc<[f32]>>,
}

impl Q8Slots {
    /// `num_slots` slots of zero bits (pages the pool never uses are never touched). `head_dim`
    /// must be a multiple of 4 (`KvCache::new` checks).
    pub(crate) fn zeros(num_slots: usize, row_len: usize, head_dim: usize) -> Self {
        let group = group_size(head_dim);
        let len = num_slots.next_multiple_of(SLOT_CHUNK) * row_len;
        let scales = || vec![0u16; len / group].reinterpret_into();
        Self {
            k: vec![0; len],
            v: vec![0; len],
            k_scales: scales(),
            v_scales: scales(),
            group,
            head_dim,
            row_len,
            key_offset: None,
        }
    }

    /// Quantizes rows of f32 K and V (`[rows, row_len]`), row `i` into slot `i`, the keys less
    /// `key_offset` (`row_len` values) where given.
    pub fn quantize(k: &[f32], v: &[f32], row_len: usize, head_dim: usize, key_offset: Option<Arc<[f32]>>) -> Self {
        let rows = k.len() / row_len.max(1);
        let mut slots = Self::zeros(rows, row_len, head_dim);
        let group = slots.group;
        let (kq, k_scales) = match &key_offset {
            Some(offset) => {
                let residual: Vec<f32> =
                    k.chunks_exact(row_len).flat_map(|row| row.iter().zip(offset.iter()).map(|(x, c)| x - c)).collect();
                quantize_groups(&residual, group)
            }
            None => quantize_groups(k, group),
        };
        slots.key_offset = key_offset;
        let (vq, v_scales) = quantize_groups(v, group);
        let groups_per_row = row_len / group;
        for slot in 0..rows {
            for kv_head in 0..row_len / head_dim {
                for d in 0..head_dim {
                    let at = slot * row_len + kv_head * head_dim + d;
                    let to = slots.k_at(slot, kv_head, d);
                    slots.k[to] = kq[at];
                }
            }
            for c in 0..groups_per_row {
                let to = slots.scale_at(slot, c);
                slots.k_scales[to] = f16::from_f32(k_scales[slot * groups_per_row + c]);
                slots.v_scales[to] = f16::from_f32(v_scales[slot * groups_per_row + c]);
            }
        }
        slots.v[..rows * row_len].copy_from_slice(&vq);
        slots
    }

    /// Where value `d` of KV head `kv_head` of `slot`'s key is.
    #[inline]
    pub fn k_at(&self, slot: usize, kv_head: usize, d: usize) -> usize {
        let (chunk, t) = (slot / SLOT_CHUNK, slot % SLOT_CHUNK);
        chunk * SLOT_CHUNK * self.row_len
            + kv_head * SLOT_CHUNK * self.head_dim
            + (d / 4) * SLOT_CHUNK * 4
            + t * 4
            + d % 4
    }

    /// Where the scale of group `c` of `slot` (counted over the whole row) is, in `k_scales`
    /// and in `v_scales`.
    #[inline]
    pub fn scale_at(&self, slot: usize, c: usize) -> usize {
        let (chunk, t) = (slot / SLOT_CHUNK, slot % SLOT_CHUNK);
        chunk * SLOT_CHUNK * (self.row_len / self.group) + c * SLOT_CHUNK + t
    }

    /// Where value `d` of KV head `kv_head` of `slot`'s value row is.
    #[inline]
    pub fn v_at(&self, slot: usize, kv_head: usize, d: usize) -> usize {
        slot * self.row_len + kv_head * self.head_dim + d
    }

    /// Copies slot `from` of `src` into slot `to`.
    pub(crate) fn copy_slot(&mut self, to: usize, src: &Q8Slots, from: usize) {
        for kv_head in 0..self.row_len / self.head_dim {
            for d in (0..self.head_dim).step_by(4) {
                let (a, b) = (self.k_at(to, kv_head, d), src.k_at(from, kv_head, d));
                self.k[a..a + 4].copy_from_slice(&src.k[b..b + 4]);
            }
        }
        let (a, b) = (self.v_at(to, 0, 0), src.v_at(from, 0, 0));
        self.v[a..a + self.row_len].copy_from_slice(&src.v[b..b + self.row_len]);
        for c in 0..self.row_len / self.group {
            let (a, b) = (self.scale_at(to, c), src.scale_at(from, c));
            self.k_scales[a] = src.k_scales[b];
            self.v_scales[a] = src.v_scales[b];
        }
    }

    /// Copies `count` slots from `from` on to `to` on, within these slots (ranges apart).
    pub(crate) fn copy_slots_within(&mut self, from: usize, to: usize, count: usize) {
        for i in 0..count {
            for kv_head in 0..self.row_len / self.head_dim {
                for d in (0..self.head_dim).step_by(4) {
                    let (a, b) = (self.k_at(to + i, kv_head, d), self.k_at(from + i, kv_head, d));
                    self.k.copy_within(b..b + 4, a);
                }
            }
            let (a, b) = (self.v_at(to + i, 0, 0), self.v_at(from + i, 0, 0));
            self.v.copy_within(b..b + self.row_len, a);
            for c in 0..self.row_len / self.group {
                let (a, b) = (self.scale_at(to + i, c), self.scale_at(from + i, c));
                self.k_scales[a] = self.k_scales[b];
                self.v_scales[a] = self.v_scales[b];
            }
        }
    }

    /// K and V of `count` slots from `first` on, as f32 rows: the keys as stored, that is less
    /// the layer's key offset (`KvCache::read_slot` adds it back).
    pub fn dequantize(&self, first: usize, count: usize) -> (Vec<f32>, Vec<f32>) {
        let (mut k, mut v) = (Vec::with_capacity(count * self.row_len), Vec::with_capacity(count * self.row_len));
        for slot in first..first + count {
            for kv_head in 0..self.row_len / self.head_dim {
                for d in 0..self.head_dim {
                    let c = (kv_head * self.head_dim + d) / self.group;
                    let scales = self.scale_at(slot, c);
                    k.push(self.k_scales[scales].to_f32() * self.k[self.k_at(slot, kv_head, d)] as f32);
                    v.push(self.v_scales[scales].to_f32() * self.v[self.v_at(slot, kv_head, d)] as f32);
                }
            }
        }
        (k, v)
    }
}

/// A group's scale and its inverse (both 0 for an all-zero group).
impl PagedRows for Q8Slots {
    fn prefetch_keys(&self, slot: usize, len: usize) {
        let chunks = slot / SLOT_CHUNK..(slot + len).div_ceil(SLOT_CHUNK);
        prefetch(&self.k, chunks.start * SLOT_CHUNK * self.row_len..chunks.end * SLOT_CHUNK * self.row_len);
        let groups = self.row_len / self.group;
        prefetch(&self.k_scales, chunks.start * SLOT_CHUNK * groups..chunks.end * SLOT_CHUNK * groups);
        // The score pass notes the largest value scales (`attention_q8_values`).
        prefetch(&self.v_scales, chunks.start * SLOT_CHUNK * groups..chunks.end * SLOT_CHUNK * groups);
    }

    fn prefetch_values(&self, slot: usize, len: usize) {
        prefetch(&self.v, slot * self.row_len..(slot + len) * self.row_len);
        let chunks = slot / SLOT_CHUNK..(slot + len).div_ceil(SLOT_CHUNK);
        let groups = self.row_len / self.group;
        prefetch(&self.v_scales, chunks.start * SLOT_CHUNK * groups..chunks.end * SLOT_CHUNK * groups);
    }
}

pub(crate) fn scale_of(values: &[f32]) -> (f32, f32) {
    let max = values.iter().fold(0f32, |m, v| m.max(v.abs()));
    let scale = max / 127.0;
    (scale, if scale > 0.0 { 1.0 / scale } else { 0.0 })
}

/// Symmetric int8 per group of `group` values, as ggml's `quantize_row_q8_0`: the values are
/// divided by the exact scale (the cache then stores it as f16; a query, quantized the same way
/// for the attention kernel, keeps it in f32). `values[i]` is worth `scales[i / group] * values[i]`.
pub(crate) fn quantize_groups(x: &[f32], group: usize) -> (Vec<i8>, Vec<f32>) {
    let mut values = Vec::with_capacity(x.len());
    let scales = x
        .chunks_exact(group)
        .map(|g| {
            let (scale, inverse) = scale_of(g);
            values.extend(g.iter().map(|&v| (v * inverse).round() as i8));
            scale
        })
        .collect();
    (values, scales)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_comes_back_within_half_a_step_of_its_group() {
        let x: Vec<f32> = (0..96).map(|i| ((i * 37 % 101) as f32 - 50.0) * if i < 32 { 10.0 } else { 0.01 }).collect();
        let q = Q8Slots::quantize(&x, &x, 96, 32, None);
        let (k, v) = q.dequantize(0, 1);
        assert_eq!(k, v);
        for (g, (orig, back)) in x.chunks(32).zip(k.chunks(32)).enumerate() {
            let max = orig.iter().fold(0f32, |m, v| m.max(v.abs()));
            let step = max / 127.0;
            for (a, b) in orig.iter().zip(back) {
                // Half a step from rounding, plus the f16 rounding of the scale (2^-11 of it).
                assert!((a - b).abs() <= 0.5 * step + max * 1e-3, "group {g}: {a} came back as {b}");
            }
        }
        // An outlier in the first group does not coarsen the others.
        assert!((x[40] - k[40]).abs() < 0.01 / 127.0 * 51.0);
    }

    /// A key offset leaves the keys' residual to the groups: a channel of about 150 no longer
    /// sets the step of its 31 neighbours of about 1, and the values are unchanged.
    #[test]
    fn a_key_offset_keeps_small_values_beside_a_large_constant() {
        let (row_len, rows) = (64, 5);
        let offset: Vec<f32> = (0..row_len).map(|d| if d == 31 { -150.0 } else { 0.0 }).collect();
        let k: Vec<f32> =
            (0..rows * row_len).map(|i| offset[i % row_len] + ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
        let plain = Q8Slots::quantize(&k, &k, row_len, 32, None);
        let shifted = Q8Slots::quantize(&k, &k, row_len, 32, Some(offset.clone().into()));
        let (plain_k, plain_v) = plain.dequantize(0, rows);
        let (residual_k, shifted_v) = shifted.dequantize(0, rows);
        assert_eq!(plain_v, shifted_v, "values carry no offset");
        let restored: Vec<f32> = residual_k.iter().enumerate().map(|(i, r)| r + offset[i % row_len]).collect();
        let worst = |back: &[f32]| k.iter().zip(back).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        // Half a step of a group whose largest value is about 1, against one of about 151.
        assert!(worst(&restored) <= 0.5 / 127.0 + 1e-3, "{}", worst(&restored));
        assert!(worst(&plain_k) > 0.2, "{}", worst(&plain_k));
    }

    /// Every slot's key values and scales land in places of their own, whatever the chunking.
    #[test]
    fn the_interleaved_layout_gives_every_value_its_own_place() {
        let (row_len, head_dim, slots) = (3 * 64, 64, 40);
        let q = Q8Slots::zeros(slots, row_len, head_dim);
        let mut seen = vec![false; q.k.len()];
        for slot in 0..slots {
            for kv_head in 0..3 {
                for d in 0..head_dim {
                    let at = q.k_at(slot, kv_head, d);
                    assert!(!seen[at], "slot {slot} head {kv_head} value {d} shares {at}");
                    seen[at] = true;
                }
            }
        }
        let mut seen = vec![false; q.k_scales.len()];
        for slot in 0..slots {
            for c in 0..row_len / 32 {
                assert!(!std::mem::replace(&mut seen[q.scale_at(slot, c)], true));
            }
        }
        // 16 slots' scales of one group are contiguous, as are 16 slots' values 4i..4i+4.
        assert_eq!(q.scale_at(17, 2) + 1, q.scale_at(18, 2));
        assert_eq!(q.k_at(16, 1, 8) + 4, q.k_at(17, 1, 8));
    }

    #[test]
    fn zeros_stay_zero_and_copies_keep_scales() {
        let x: Vec<f32> = (0..128).map(|i| i as f32 / 7.0).collect();
        let src = Q8Slots::quantize(&x, &x, 64, 32, None);
        let mut dst = Q8Slots::zeros(40, 64, 32);
        assert_eq!(dst.dequantize(0, 40).0, vec![0.0; 40 * 64]);
        dst.copy_slot(17, &src, 1);
        assert_eq!(dst.dequantize(17, 1), src.dequantize(1, 1));
        dst.copy_slots_within(16, 33, 2);
        assert_eq!(dst.dequantize(34, 1), src.dequantize(1, 1));
        assert_eq!(dst.dequantize(33, 1).0, vec![0.0; 64]);
    }

    #[test]
    fn heads_that_are_not_a_multiple_of_32_get_one_scale_each() {
        assert_eq!(group_size(64), 32);
        assert_eq!(group_size(16), 16);
        let (q, s) = quantize_groups(&[1.0, -2.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0], 4);
        assert_eq!(q[..4], [64, -127, 32, 0]);
        assert_eq!(s, vec![2.0 / 127.0, 0.0]);
    }
}
