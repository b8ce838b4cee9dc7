//! The value sum over the 8-bit cache, in integers: each key's weight `probability x value
//! scale` becomes an int16 and multiplies the key's int8 values, two keys per instruction
//! (`vpdpwssd`, or `pmaddwd` on AVX2), into int32 sums that return to f32 once a tile of keys.
//! Multiplying the f32 weight into each widened value, as the f16 cache does, took one fma per
//! key, value and query head; the pairs halve that and the widening to 16 bits is cheaper.
//!
//! A row's weights share one scale per query head and value group, so that integer sums across
//! keys mean something: `P x S / 32767`, with `P` the head's largest probability and `S` the
//! group's largest value scale over the row's keys (the score pass notes `S`, the first value
//! pass finds `P`). A key's weight is `round(p x (s x 32767 / (P x S)))`, at most 32767: the
//! largest weight keeps 15 bits, and a weight below it loses at most half a step of the largest,
//! far below the int8 values' own half step. Both maxima depend on the row's keys alone, and
//! integer sums on no order, so the result does not depend on how the keys split into runs
//! (prompt chunks, pages) nor on the kernel: every kernel has the same weights and the same
//! integers, and each tile ends with `out = fma(f32(sum), P x S / 32767, out)` per value.
//!
//! A tile holds at most `TILE_KEYS` keys, so a sum stays below `TILE_KEYS x 32767 x 127`, which
//! fits an i32.

use std::ops::Range;

use half::f16;

use crate::attention_runs::{chunks, Geometry, KeyRun, TILE_KEYS};
use crate::kv_layout::SLOT_CHUNK;
use crate::kv_q8::Q8Slots;

/// The largest weight.
pub(crate) const WEIGHT_MAX: f32 = i16::MAX as f32;

const _: () = assert!(TILE_KEYS * i16::MAX as usize * 127 <= i32::MAX as usize);

/// One row's value sum over its runs: the largest value scales its score pass saw, the weights'
/// gains once its probabilities are known, and the int32 sums of the tile in progress.
pub(crate) struct ValueSum {
    /// The first scale group the row's KV heads read (`kv_head x groups + c`).
    first_group: usize,
    /// Per scale group the row reads, the largest value scale lane by lane of a chunk, as f16
    /// bits (scales are never negative, so their bits order as they do).
    scale_max: Vec<[u16; SLOT_CHUNK]>,
    /// Per query head and group: `32767 / (P x S)` and `P x S / 32767`; empty until the first
    /// value pass.
    pub gains: Vec<f32>,
    steps: Vec<f32>,
    /// `heads x head_dim` sums since the tile began, in the kernel's order (`Layout`).
    pub sums: Vec<i32>,
}

/// Where a kernel keeps the sum of value `d` of a head: in order, or in blocks of 16 or 32
/// values whose keys' pairs were interleaved 16 bits at a time within 128-bit lanes (the
/// block's first half holds values `8L..8L + 4` of each lane `L`, its second half `8L + 4..`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Layout {
    InOrder,
    Pairs(usize),
}

impl Layout {
    /// Which value the sum at `at` belongs to.
    pub(crate) fn value_at(self, at: usize) -> usize {
        match self {
            Layout::InOrder => at,
            Layout::Pairs(block) => {
                let (half, j) = ((at % block) / (block / 2), at % (block / 2));
                at / block * block + 8 * (j / 4) + 4 * half + j % 4
            }
        }
    }
}

impl ValueSum {
    pub(crate) fn new(g: &Geometry, heads: &Range<usize>) -> Self {
        let groups = g.head_dim / g.group;
        let kv_heads = heads.start / g.heads_per_kv..heads.end.div_ceil(g.heads_per_kv);
        Self {
            first_group: kv_heads.start * groups,
            scale_max: vec![[0; SLOT_CHUNK]; kv_heads.len() * groups],
            gains: Vec::with_capacity(heads.len() * groups),
            steps: Vec::with_capacity(heads.len() * groups),
            sums: vec![0; heads.len() * g.head_dim],
        }
    }

    /// Notes the value scales of a run's keys (the score pass).
    pub(crate) fn note_scales(&mut self, run: &KeyRun<'_, Q8Slots>) {
        let src = run.src;
        for (base, lanes) in chunks(run) {
            for (i, max) in self.scale_max.iter_mut().enumerate() {
                let at = src.scale_at(base, self.first_group + i);
                let scales: &[f16; SLOT_CHUNK] =
                    src.v_scales[at..at + SLOT_CHUNK].try_into().expect("a chunk's scales");
                let mut m = *max;
                if lanes.len() == SLOT_CHUNK {
                    for t in 0..SLOT_CHUNK {
                        m[t] = m[t].max(scales[t].to_bits());
                    }
                } else {
                    for t in lanes.clone() {
                        m[t] = m[t].max(scales[t].to_bits());
                    }
                }
                *max = m;
            }
        }
    }

    /// The weights' gains from the row's probabilities, once, before its first values.
    pub(crate) fn prepare(&mut self, g: &Geometry, heads: &Range<usize>, probs: &[f32]) {
        if !self.gains.is_empty() {
            return;
        }
        let groups = g.head_dim / g.group;
        for h in heads.clone() {
            let largest_p = largest(&probs[(h - g.h0) * g.num_keys..][..g.num_keys]);
            let first = (h / g.heads_per_kv) * groups - self.first_group;
            for max in &self.scale_max[first..first + groups] {
                let largest_s = f16::from_bits(max.iter().copied().fold(0, u16::max)).to_f32();
                let top = largest_p * largest_s;
                self.gains.push(if top > 0.0 { WEIGHT_MAX / top } else { 0.0 });
                self.steps.push(top / WEIGHT_MAX);
            }
        }
    }

    /// Adds the tile's sums, kept in `layout`, into `out_heads` and starts the next tile.
    pub(crate) fn flush(&mut self, g: &Geometry, layout: Layout, out_heads: &mut [f32]) {
        let groups = g.head_dim / g.group;
        for (n, (sums, out)) in
            self.sums.chunks_exact_mut(g.head_dim).zip(out_heads.chunks_exact_mut(g.head_dim)).enumerate()
        {
            for (at, sum) in sums.iter_mut().enumerate() {
                let d = layout.value_at(at);
                out[d] = (*sum as f32).mul_add(self.steps[n * groups + d / g.group], out[d]);
                *sum = 0;
            }
        }
    }

    /// `P x S / 32767` of the task's head `n` and group `c` (what a flush multiplies by).
    pub(crate) fn step(&self, n: usize, c: usize, groups: usize) -> f32 {
        self.steps[n * groups + c]
    }
}

/// The largest of non-negative values (their bits order as they do, so the vector units compare
/// integers).
fn largest(row: &[f32]) -> f32 {
    f32::from_bits(row.iter().fold(0, |m, x| m.max(x.to_bits())))
}

/// A key's int16 weight: `round(p x (scale x gain))`, ties to even as the vector conversions
/// round, saturated as they pack.
#[inline]
pub(crate) fn weight(p: f32, scale: f32, gain: f32) -> i32 {
    ((p * (scale * gain)).round_ties_even() as i32).clamp(i16::MIN as i32, i16::MAX as i32)
}

/// Adds a run's keys' `weight x value` to the row's sums, in order (`Layout::InOrder`).
pub(crate) fn value_run(
    g: &Geometry,
    probs: &[f32],
    heads: Range<usize>,
    run: &KeyRun<'_, Q8Slots>,
    sum: &mut ValueSum,
) {
    let src = run.src;
    let groups = g.head_dim / g.group;
    for i in 0..run.len {
        let slot = run.slot + i;
        for h in heads.clone() {
            let kv_head = h / g.heads_per_kv;
            let p = probs[(h - g.h0) * g.num_keys + run.key + i];
            let v = &src.v[src.v_at(slot, kv_head, 0)..][..g.head_dim];
            let sums = &mut sum.sums[(h - g.h0) * g.head_dim..][..g.head_dim];
            for c in 0..groups {
                let scale = src.v_scales[src.scale_at(slot, kv_head * groups + c)].to_f32();
                let w = weight(p, scale, sum.gains[(h - g.h0) * groups + c]);
                for d in c * g.group..(c + 1) * g.group {
                    sums[d] += w * v[d] as i32;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layout_puts_each_value_in_one_place() {
        for layout in [Layout::InOrder, Layout::Pairs(16), Layout::Pairs(32)] {
            let mut seen: Vec<usize> = (0..64).map(|at| layout.value_at(at)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..64).collect::<Vec<_>>(), "{layout:?}");
        }
        // The 16-bit interleave of 128-bit lanes: the first half holds values 0-3 and 8-11 of a
        // 16-value block, the second 4-7 and 12-15.
        let pairs16: Vec<usize> = (0..16).map(|at| Layout::Pairs(16).value_at(at)).collect();
        assert_eq!(pairs16, [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15]);
        assert_eq!(Layout::Pairs(32).value_at(5), 9);
        assert_eq!(Layout::Pairs(32).value_at(16), 4);
        assert_eq!(Layout::Pairs(32).value_at(32 + 16 + 15), 32 + 31);
    }

    #[test]
    fn the_largest_weight_is_the_largest_int16_and_ties_round_to_even() {
        let (p, s) = (0.37f32, 0.0123f32);
        let gain = WEIGHT_MAX / (p * s);
        assert!((weight(p, s, gain) - 32767).abs() <= 1);
        assert_eq!(weight(2.5, 1.0, 1.0), 2);
        assert_eq!(weight(3.5, 1.0, 1.0), 4);
        assert_eq!(weight(1e9, 1.0, 1.0), 32767);
    }

    #[test]
    fn the_largest_of_a_row_ignores_no_lane() {
        for len in [1, 15, 16, 17, 33, 100] {
            for top in 0..len {
                let row: Vec<f32> = (0..len).map(|i| if i == top { 0.75 } else { (i % 7) as f32 * 0.01 }).collect();
                assert_eq!(largest(&row), 0.75, "len {len}, top at {top}");
            }
        }
    }
}
