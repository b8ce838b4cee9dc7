//! Weights repacked once at load into the microkernel's panel layout.
//!
//! Output columns (weight rows) are grouped in panels of `PANEL` (8); within a panel, block `b`
//! is cut into 8 groups of 4 consecutive inputs, and group `g` is one 32-byte vector holding
//! the group's 4 quants of each of the 8 columns (`[g][column][4]`). Against an activation
//! group broadcast to all lanes, one `maddubs` + `madd` leaves column `c`'s 4 products summed
//! in lane `c`: the lanes are the columns, so no horizontal sums are needed. 4-bit quants
//! (`Nibble`) share bytes between groups: vector `h` holds group `h` in its low nibbles and
//! group `h + 4` in its high ones, which halves the bytes a decode step streams from memory.
//! 5-bit quants (`Unsigned`) are laid out as nibbles, followed by a plane of their fifth bits:
//! one 32-bit word per group whose bit `i` belongs to byte `i` of the group's vector, so a
//! block takes 160 bytes rather than 256 (Qwen2.5's q/k/v/o/gate/up are Q5_0).
//! Scales and mins are `[panel][block][PANEL]`, f16 where that is exact (`factors.rs`). Formats
//! whose min is a fixed multiple of the scale (Q4_0, Q5_0) store no mins: a 4-bit weight then
//! streams 4.5 bits per weight, as in the GGUF, instead of 5.
//! The last panel is padded with zero columns (zero quants, scales and mins).

use candle_core::quantized::QTensor;

use candle_core::quantized::GgmlDType;

use super::factors::{FactorVec, Factors, SubBlockFactors, SUPER_BLOCKS};
use super::formats::{decode, format_of, Block32};
use super::quant_bytes::QuantBytes;
use super::{Int8GemmError, BLOCK, PANEL};

/// How quants are interpreted by the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantKind {
    /// `w = d * q + m`, `q` in `0..=31` (Q5_0, Q5_1, Q5_K): `Nibble`'s layout plus a fifth-bit
    /// plane.
    Unsigned,
    /// `w = d * q + m`, `q` in `0..=15`, two columns per byte (Q4_0, Q4_1, Q4_K).
    Nibble,
    /// `w = d * q`, `q` an `i8` stored as its bits (Q8_0, and re-quantized K-quants).
    Signed,
}

/// A `[out, in]` weight matrix in panel layout.
pub struct PackedWeight {
    kind: QuantKind,
    out_features: usize,
    in_features: usize,
    blocks: usize,
    quants: QuantBytes,
    scales: FactorVec,
    /// Empty for `Signed` weights, which have no min term, and where `min_per_scale` gives it.
    mins: FactorVec,
    min_per_scale: Option<f32>,
}

/// One panel's slices, as the kernels read them.
pub(crate) struct Panel<'a> {
    pub kind: QuantKind,
    pub blocks: usize,
    /// Per block: `[8 groups][PANEL][4]` bytes for `Signed`; `[4][PANEL][4]` nibble bytes for
    /// `Nibble`, and for `Unsigned` those followed by 8 words of fifth bits.
    pub quants: &'a [u8],
    /// `[blocks][PANEL]`.
    pub scales: Factors<'a>,
    pub mins: Mins<'a>,
}

/// Where a panel's min terms come from.
#[derive(Clone, Copy)]
pub(crate) enum Mins<'a> {
    /// `Signed` weights have none.
    Absent,
    /// `[blocks][PANEL]`, in the width of the scales.
    Stored(Factors<'a>),
    /// This multiple of the block's scale: `k * d` in f32 is what the packer's decoder computed
    /// (`formats.rs`), so a kernel recomputes each min bit for bit from the scale it loads.
    OfScale(f32),
}

impl PackedWeight {
    /// Repacks a 2-D quantized weight; `Ok(None)` when its format is not supported here.
    pub fn from_qtensor(weight: &QTensor) -> Result<Option<Self>, Int8GemmError> {
        let &[out_features, in_features] = weight.shape().dims() else { return Ok(None) };
        let Some(format) = format_of(weight.dtype()) else {
            return if requantizable(weight.dtype()) {
                Self::requantized(weight, out_features, in_features).map(Some)
            } else {
                Ok(None)
            };
        };
        if in_features % format.block_elems != 0 {
            return Err(Int8GemmError::BadBlockCount { cols: in_features, block: format.block_elems });
        }
        let data = weight.data().map_err(|e| Int8GemmError::Data(e.to_string()))?;
        let row_bytes = in_features / format.block_elems * format.block_bytes;
        if data.len() != out_features * row_bytes {
            return Err(Int8GemmError::BadDataLength { got: data.len(), expected: out_features * row_bytes });
        }
        let subs = format.block_elems / BLOCK;
        Self::from_blocks(format.kind, format.min_per_scale, out_features, in_features, |col, b| {
            let start = col * row_bytes + (b / subs) * format.block_bytes;
            decode(&format, &data[start..start + format.block_bytes], b % subs)
        })
        .map(Some)
    }

    /// K-quants whose sub-blocks do not map onto 32-element blocks (Q6_K's 16-element
    /// sub-blocks, for one) are dequantized and re-quantized to 8 bits per 32 elements, like
    /// Q8_0: the rounding step is a quarter of Q6_K's own or less, and in exchange these
    /// tensors (Qwen2.5's lm_head among them) get the batched kernel instead of candle's
    /// per-row one. The f32 copy lives only while packing.
    fn requantized(weight: &QTensor, out_features: usize, in_features: usize) -> Result<Self, Int8GemmError> {
        if !in_features.is_multiple_of(BLOCK) {
            return Err(Int8GemmError::BadBlockCount { cols: in_features, block: BLOCK });
        }
        let data = |e: candle_core::Error| Int8GemmError::Data(e.to_string());
        let w = weight
            .dequantize(&candle_core::Device::Cpu)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(data)?;
        if w.len() != out_features * in_features {
            return Err(Int8GemmError::BadDataLength { got: w.len(), expected: out_features * in_features });
        }
        Self::from_blocks(QuantKind::Signed, None, out_features, in_features, |col, b| {
            let start = col * in_features + b * BLOCK;
            quantize_q8_block(&w[start..start + BLOCK])
        })
    }

    /// Packs from a per-(column, block) decoder; with `min_per_scale` `k`, every block's `m` is
    /// `k * d` and none is stored. Where every block comes with Q4_K's (or Q5_K's) factoring of
    /// `d` and `m` (and a panel's blocks are whole super-blocks), that factoring is what is
    /// stored.
    pub(crate) fn from_blocks(
        kind: QuantKind,
        min_per_scale: Option<f32>,
        out_features: usize,
        in_features: usize,
        mut block: impl FnMut(usize, usize) -> Block32,
    ) -> Result<Self, Int8GemmError> {
        let blocks = in_features / BLOCK;
        let panels = out_features.div_ceil(PANEL);
        let block_bytes = kind.panel_block_bytes();
        let bytes = panels * blocks * block_bytes;
        let mut quants = QuantBytes::zeroed(bytes).map_err(|e| Int8GemmError::Memory { bytes, kind: e.kind() })?;
        let mut scales = vec![0.0f32; panels * blocks * PANEL];
        let stores_mins = kind != QuantKind::Signed && min_per_scale.is_none();
        let mut mins = vec![0.0f32; if stores_mins { scales.len() } else { 0 }];
        let mut factored = blocks.is_multiple_of(SUPER_BLOCKS).then(|| SubBlockFactors::zeroed(scales.len()));
        for col in 0..out_features {
            let (p, c) = (col / PANEL, col % PANEL);
            for b in 0..blocks {
                let Block32 { q, d, m, sub } = block(col, b);
                let at = (p * blocks + b) * PANEL + c;
                let bytes = (p * blocks + b) * block_bytes;
                for (j, &v) in q.iter().enumerate() {
                    kind.put(&mut quants[bytes..bytes + block_bytes], c, j, v);
                }
                scales[at] = d;
                debug_assert!(min_per_scale.is_none_or(|k| (k * d).to_bits() == m.to_bits()));
                if let Some(slot) = mins.get_mut(at) {
                    *slot = m;
                }
                match (&mut factored, sub) {
                    (Some(factors), Some(sub)) => factors.put(at, &sub),
                    _ => factored = None,
                }
            }
        }
        let (scales, mins) = match factored.filter(|_| stores_mins) {
            Some(factors) => factors.into_vecs(),
            None => FactorVec::narrowest(scales, mins),
        };
        let min_per_scale = min_per_scale.filter(|_| kind != QuantKind::Signed);
        Ok(Self { kind, out_features, in_features, blocks, quants, scales, mins, min_per_scale })
    }

    pub fn kind(&self) -> QuantKind {
        self.kind
    }

    pub fn out_features(&self) -> usize {
        self.out_features
    }

    pub fn in_features(&self) -> usize {
        self.in_features
    }

    /// Bytes the packed weight holds (quants, scales and mins): what a batch-1 step streams.
    pub fn packed_bytes(&self) -> usize {
        self.quants.len() + self.scales.bytes() + self.mins.bytes()
    }

    pub(crate) fn num_panels(&self) -> usize {
        self.out_features.div_ceil(PANEL)
    }

    /// Called for every panel a kernel runs (57k times a Qwen2.5-0.5B token at batch 1).
    /// Out of line (and `FactorVec::slice` with it), the slices went through the stack and a
    /// wide load copying two narrower stores missed store forwarding; inlined, they stay in
    /// registers (docs/benchmarks/notebook.md, "2026-11-27 02:03-03:18 UTC").
    #[inline(always)]
    pub(crate) fn panel(&self, p: usize) -> Panel<'_> {
        let s = p * self.blocks * PANEL;
        let e = s + self.blocks * PANEL;
        let bytes = self.blocks * self.kind.panel_block_bytes();
        Panel {
            kind: self.kind,
            blocks: self.blocks,
            quants: &self.quants[p * bytes..(p + 1) * bytes],
            scales: self.scales.slice(s, e),
            mins: match self.min_per_scale {
                Some(k) => Mins::OfScale(k),
                None if self.kind == QuantKind::Signed => Mins::Absent,
                None => Mins::Stored(self.mins.slice(s, e)),
            },
        }
    }

    /// The weights the kernel multiplies, `[out][in]` f32 (`d * q + m`), for reference checks.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut w = vec![0.0f32; self.out_features * self.in_features];
        for col in 0..self.out_features {
            let panel = self.panel(col / PANEL);
            let c = col % PANEL;
            for b in 0..self.blocks {
                let at = b * PANEL + c;
                let m = panel.min(at);
                for j in 0..BLOCK {
                    let q = panel.quant(b, c, j) as f32;
                    w[col * self.in_features + b * BLOCK + j] = panel.scales.get(at) * q + m;
                }
            }
        }
        w
    }
}

impl QuantKind {
    /// Bytes one block of a panel's quants takes.
    pub(crate) fn panel_block_bytes(self) -> usize {
        match self {
            QuantKind::Nibble => NIBBLE_BYTES,
            QuantKind::Unsigned => NIBBLE_BYTES + PANEL * BLOCK / 8,
            QuantKind::Signed => PANEL * BLOCK,
        }
    }

    /// Stores quant `j` of column `c` into its panel block's bytes (zeroed before).
    fn put(self, block: &mut [u8], c: usize, j: usize, q: u8) {
        let (byte, shift) = nibble_position(c, j);
        match self {
            QuantKind::Signed => block[(j / 4) * BLOCK + c * 4 + j % 4] = q,
            QuantKind::Nibble => block[byte] |= (q & 0x0F) << shift,
            QuantKind::Unsigned => {
                block[byte] |= (q & 0x0F) << shift;
                let (at, bit) = fifth_bit_position(c, j);
                block[at] |= (q >> 4 & 1) << bit;
            }
        }
    }

    /// Quant `j` of column `c` from its panel block's bytes.
    #[inline(always)]
    fn get(self, block: &[u8], c: usize, j: usize) -> i32 {
        let (byte, shift) = nibble_position(c, j);
        match self {
            QuantKind::Signed => block[(j / 4) * BLOCK + c * 4 + j % 4] as i8 as i32,
            QuantKind::Nibble => (block[byte] >> shift & 0x0F) as i32,
            QuantKind::Unsigned => {
                let (at, bit) = fifth_bit_position(c, j);
                ((block[byte] >> shift & 0x0F) | (block[at] >> bit & 1) << 4) as i32
            }
        }
    }
}

/// The bytes of a panel block's nibbles (all of a `Nibble` block, the start of an `Unsigned` one).
pub(crate) const NIBBLE_BYTES: usize = PANEL * BLOCK / 2;

/// Where the low 4 bits of quant `j` of column `c` sit: (byte, bit shift). Group `g`'s byte for
/// column `c` and input `j % 4` is byte `c * 4 + j % 4` of its 32-byte vector.
#[inline(always)]
fn nibble_position(c: usize, j: usize) -> (usize, u32) {
    let group = j / 4;
    ((group % 4) * BLOCK + c * 4 + j % 4, 4 * (group / 4) as u32)
}

/// Where the fifth bit of an `Unsigned` quant sits: group `g`'s 32-bit word after the nibbles,
/// bit `c * 4 + j % 4` (the quant's byte in the group's vector), little-endian.
#[inline(always)]
fn fifth_bit_position(c: usize, j: usize) -> (usize, u32) {
    let i = c * 4 + j % 4;
    (NIBBLE_BYTES + (j / 4) * 4 + i / 8, (i % 8) as u32)
}

impl Panel<'_> {
    /// The min term of scale `at` (`[block][PANEL]`); 0 for `Signed` panels.
    #[inline(always)]
    pub(crate) fn min(&self, at: usize) -> f32 {
        match self.mins {
            Mins::Absent => 0.0,
            Mins::Stored(mins) => mins.get(at),
            Mins::OfScale(k) => k * self.scales.get(at),
        }
    }

    /// Quant `j` of block `b` in column `c` of the panel, as an integer.
    #[inline(always)]
    pub(crate) fn quant(&self, b: usize, c: usize, j: usize) -> i32 {
        let bytes = self.kind.panel_block_bytes();
        self.kind.get(&self.quants[b * bytes..(b + 1) * bytes], c, j)
    }
}

/// Formats packed by re-quantization (see `PackedWeight::requantized`).
fn requantizable(dtype: GgmlDType) -> bool {
    matches!(dtype, GgmlDType::Q2K | GgmlDType::Q3K | GgmlDType::Q6K)
}

/// One 32-element block as Q8_0 does it: `d = max|w| / 127`, `q = round(w / d)`.
fn quantize_q8_block(w: &[f32]) -> Block32 {
    let amax = w.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let mut q = [0u8; BLOCK];
    if amax == 0.0 || !amax.is_finite() {
        return Block32 { q, d: 0.0, m: 0.0, sub: None };
    }
    let d = amax / 127.0;
    for (slot, v) in q.iter_mut().zip(w) {
        *slot = (v / d).round().clamp(-127.0, 127.0) as i8 as u8;
    }
    Block32 { q, d, m: 0.0, sub: None }
}
