//! A packed weight's per-(column, block) scales and mins, stored in no more bytes than the GGUF
//! gives them, and read back exactly.
//!
//! The GGML formats with f16 block scales (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) keep 2 bytes per value:
//! widening f16 to f32 is exact, so the kernels compute the same bits as from f32 (Q4_0's and
//! Q5_0's mins are not stored at all, `pack::Mins::OfScale`). Q4_K's and Q5_K's scales and mins
//! are an f16 per 256 elements times a 6-bit integer per 32; they keep that factoring
//! (`SubBlock`: the f16s and a byte per integer), and the kernels multiply the two in f32, which
//! is exact and so gives the bits of the product. Re-quantized scales need f32. A batch-1 decode
//! step streams every weight byte from memory: a 4-bit weight's scales and mins take 0.75 bytes
//! per weight in f32, 0.625 in f16 and 0.58 factored, against 4 bits (0.5 bytes) of quants.

use half::f16;

use super::formats::SubScales;
use super::PANEL;

/// Blocks per Q4_K or Q5_K super-block: the blocks whose scales share one f16 factor.
pub(crate) const SUPER_BLOCKS: usize = 8;

/// Bytes of a `SubBlock` super-block of one panel: `PANEL` f16 factors, then the u8 factors of
/// its `SUPER_BLOCKS` blocks (`[block][PANEL]`). One stream, so a kernel keeps one address per
/// panel for them, as for the other widths.
pub(crate) const SUPER_BYTES: usize = 2 * PANEL + SUPER_BLOCKS * PANEL;

/// A weight's values: all f16, all f32, or (Q4_K, Q5_K) a u8 per value times an f16 per
/// super-block.
pub(crate) enum FactorVec {
    Half(Vec<f16>),
    Single(Vec<f32>),
    /// `SUPER_BYTES` per super-block of a panel.
    SubBlock(Vec<u8>),
}

/// A panel's share of a `FactorVec`, as the kernels read it.
#[derive(Clone, Copy)]
pub(crate) enum Factors<'a> {
    Half(&'a [f16]),
    Single(&'a [f32]),
    /// Value `i` (`[block][PANEL]`) is its super-block's f16 for column `i % PANEL` times its
    /// u8, computed in f32 (exact: an f16 times a 6-bit integer).
    SubBlock(&'a [u8]),
}

/// How a kernel loads a weight's factors: `Factors`' variant as a const generic.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Width {
    Half,
    Single,
    SubBlock,
}

impl FactorVec {
    /// Scales and mins in f16 when every value of both widens back to itself, else in f32; the
    /// two always share one width, so a kernel reads both the same way.
    pub(crate) fn narrowest(scales: Vec<f32>, mins: Vec<f32>) -> (FactorVec, FactorVec) {
        let exact = |v: &f32| f16::from_f32(*v).to_f32().to_bits() == v.to_bits();
        if scales.iter().chain(&mins).all(exact) {
            let half = |v: Vec<f32>| FactorVec::Half(v.into_iter().map(f16::from_f32).collect());
            (half(scales), half(mins))
        } else {
            (FactorVec::Single(scales), FactorVec::Single(mins))
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        match self {
            FactorVec::Half(v) => 2 * v.len(),
            FactorVec::Single(v) => 4 * v.len(),
            FactorVec::SubBlock(v) => v.len(),
        }
    }

    /// Values `start..end`; for `SubBlock`, `start` and `end` are whole super-blocks of a panel.
    #[inline(always)]
    pub(crate) fn slice(&self, start: usize, end: usize) -> Factors<'_> {
        match self {
            FactorVec::Half(v) => Factors::Half(&v[start..end]),
            FactorVec::Single(v) => Factors::Single(&v[start..end]),
            FactorVec::SubBlock(v) => Factors::SubBlock(&v[sub_block_bytes(start)..sub_block_bytes(end)]),
        }
    }
}

/// The bytes of `SubBlock` values `0..values`, whole super-blocks of panels.
fn sub_block_bytes(values: usize) -> usize {
    values / (SUPER_BLOCKS * PANEL) * SUPER_BYTES
}

/// Where value `i`'s f16 factor and its u8 factor sit in `SubBlock` bytes.
#[inline(always)]
pub(crate) fn sub_block_positions(i: usize) -> (usize, usize) {
    let start = sub_block_bytes(i);
    (start + 2 * (i % PANEL), start + 2 * PANEL + i % (SUPER_BLOCKS * PANEL))
}

/// `SubBlock` scales and mins as a packer fills them, value by value (`[panel][block][PANEL]`).
pub(crate) struct SubBlockFactors {
    scales: Vec<u8>,
    mins: Vec<u8>,
}

impl SubBlockFactors {
    /// `values` of each, all zero (what padding columns keep).
    pub(crate) fn zeroed(values: usize) -> Self {
        Self { scales: vec![0; sub_block_bytes(values)], mins: vec![0; sub_block_bytes(values)] }
    }

    /// Value `at`'s scale `d_super * sc` and min `-(dmin_super * mn)`, stored as the min's
    /// `(-dmin_super) * mn`: negating an f16 is exact, and so is negating the product.
    pub(crate) fn put(&mut self, at: usize, sub: &SubScales) {
        let (super_at, sub_at) = sub_block_positions(at);
        self.scales[super_at..super_at + 2].copy_from_slice(&sub.d_super.to_le_bytes());
        self.mins[super_at..super_at + 2].copy_from_slice(&(-sub.dmin_super).to_le_bytes());
        self.scales[sub_at] = sub.sc;
        self.mins[sub_at] = sub.mn;
    }

    /// (scales, mins).
    pub(crate) fn into_vecs(self) -> (FactorVec, FactorVec) {
        (FactorVec::SubBlock(self.scales), FactorVec::SubBlock(self.mins))
    }
}

impl Factors<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Factors::Half(v) => v.len(),
            Factors::Single(v) => v.len(),
            Factors::SubBlock(v) => v.len() / SUPER_BYTES * SUPER_BLOCKS * PANEL,
        }
    }

    pub(crate) fn width(&self) -> Width {
        match self {
            Factors::Half(_) => Width::Half,
            Factors::Single(_) => Width::Single,
            Factors::SubBlock(_) => Width::SubBlock,
        }
    }

    /// Whether `len` values can be read: for `SubBlock`, whole super-blocks of `PANEL` columns.
    pub(crate) fn holds(&self, len: usize) -> bool {
        match self {
            Factors::SubBlock(v) => len.is_multiple_of(SUPER_BLOCKS * PANEL) && v.len() == sub_block_bytes(len),
            _ => self.len() == len,
        }
    }

    /// Value `i` as f32.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> f32 {
        match self {
            Factors::Half(v) => v[i].to_f32(),
            Factors::Single(v) => v[i],
            Factors::SubBlock(v) => {
                let (super_at, sub_at) = sub_block_positions(i);
                f16::from_le_bytes([v[super_at], v[super_at + 1]]).to_f32() * v[sub_at] as f32
            }
        }
    }

    /// The first value's address, for the SIMD kernels' loads (`width` gives the layout).
    #[inline(always)]
    pub(crate) fn as_ptr(&self) -> *const u8 {
        match self {
            Factors::Half(v) => v.as_ptr() as *const u8,
            Factors::Single(v) => v.as_ptr() as *const u8,
            Factors::SubBlock(v) => v.as_ptr(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_only_when_every_scale_and_min_is_exact() {
        let is_half = |f: Factors<'_>| f.width() == Width::Half;
        let subnormal = f16::from_bits(3).to_f32();
        let (scales, mins) = FactorVec::narrowest(vec![0.5, -0.0078125, subnormal], vec![-4.0, 0.0, 65504.0]);
        assert!(is_half(scales.slice(0, 1)) && is_half(mins.slice(0, 1)));
        assert_eq!([scales.slice(0, 3).get(2), mins.slice(0, 3).get(2)], [subnormal, 65504.0]);
        // One min beyond f16's precision keeps both in f32, unrounded.
        let (scales, mins) = FactorVec::narrowest(vec![0.5, 0.25], vec![0.1, 0.0]);
        assert!(!is_half(scales.slice(0, 1)) && !is_half(mins.slice(0, 1)));
        assert_eq!(mins.slice(0, 1).get(0), 0.1);
        // Beyond f16's range, or below its smallest subnormal, stays f32 too.
        assert!(!is_half(FactorVec::narrowest(vec![70000.0], vec![]).0.slice(0, 1)));
        assert!(!is_half(FactorVec::narrowest(vec![1e-9], vec![]).0.slice(0, 1)));
    }
}
