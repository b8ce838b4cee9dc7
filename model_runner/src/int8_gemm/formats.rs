//! Decoding GGML block formats into the kernel's uniform 32-element block:
//! `w = d * q + m` with integer quants `q` (unsigned, `0..=15` or `0..=31`) or `w = d * q`
//! (signed `i8`).
//!
//! Every supported format maps exactly (no re-quantization): the f16 scales widen to f32 and
//! Q4_K's and Q5_K's 6-bit sub-block scales multiply into them without rounding (11 + 6 bits
//! fit in f32's 24-bit mantissa). Q6_K's 16-element sub-blocks do not fit a 32-element block
//! with one scale: `pack.rs` re-quantizes it (and Q2_K, Q3_K) to 8 bits instead of decoding it
//! here.

use candle_core::quantized::GgmlDType;
use half::f16;

use super::pack::QuantKind;
use super::BLOCK;

/// One decoded 32-element block.
pub(crate) struct Block32 {
    pub q: [u8; BLOCK],
    pub d: f32,
    pub m: f32,
    /// Q4_K's and Q5_K's factoring of `d` and `m`.
    pub sub: Option<SubScales>,
}

/// `d = d_super * sc` and `m = -(dmin_super * mn)`, as Q4_K and Q5_K store them: an f16 pair
/// per 256 elements and 6-bit integers per 32.
pub(crate) struct SubScales {
    pub d_super: f16,
    pub sc: u8,
    pub dmin_super: f16,
    pub mn: u8,
}

/// The layout of one GGML format: elements and bytes per GGML block.
pub(crate) struct Format {
    pub dtype: GgmlDType,
    pub kind: QuantKind,
    pub block_elems: usize,
    pub block_bytes: usize,
    /// `k` where every block's min is `k * d` (Q4_0's -8, Q5_0's -16: the quants' midpoint).
    pub min_per_scale: Option<f32>,
}

/// The formats the kernel supports, or `None` (the caller falls back to candle's kernels).
pub(crate) fn format_of(dtype: GgmlDType) -> Option<Format> {
    let (kind, block_elems, block_bytes, min_per_scale) = match dtype {
        GgmlDType::Q4_0 => (QuantKind::Nibble, 32, 18, Some(-8.0)),
        GgmlDType::Q4_1 => (QuantKind::Nibble, 32, 20, None),
        GgmlDType::Q5_0 => (QuantKind::Unsigned, 32, 22, Some(-16.0)),
        GgmlDType::Q5_1 => (QuantKind::Unsigned, 32, 24, None),
        GgmlDType::Q8_0 => (QuantKind::Signed, 32, 34, None),
        GgmlDType::Q4K => (QuantKind::Nibble, 256, 144, None),
        GgmlDType::Q5K => (QuantKind::Unsigned, 256, 176, None),
        _ => return None,
    };
    // Guard against a candle version whose block layout differs from the one decoded here.
    if dtype.block_size() != block_elems || dtype.type_size() != block_bytes {
        return None;
    }
    Some(Format { dtype, kind, block_elems, block_bytes, min_per_scale })
}

fn f16_at(b: &[u8], at: usize) -> f16 {
    f16::from_le_bytes([b[at], b[at + 1]])
}

fn half(b: &[u8], at: usize) -> f32 {
    f16_at(b, at).to_f32()
}

/// Nibbles as GGML stores them in 32-element blocks: low nibbles are elements 0..16, high 16..32.
fn nibbles(qs: &[u8]) -> [u8; BLOCK] {
    let mut q = [0u8; BLOCK];
    for j in 0..16 {
        q[j] = qs[j] & 0x0F;
        q[j + 16] = qs[j] >> 4;
    }
    q
}

/// Q5's fifth bits: bit `j` of `qh` belongs to element `j`.
fn with_high_bits(mut q: [u8; BLOCK], qh: &[u8]) -> [u8; BLOCK] {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    for (j, v) in q.iter_mut().enumerate() {
        *v |= (((qh >> j) & 1) as u8) << 4;
    }
    q
}

/// Q4_K's packed 6-bit (scale, min) of sub-block `j` (ggml's `get_scale_min_k4`).
fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
    }
}

/// Decodes 32-element sub-block `sub` of the GGML block `b` (exactly `format.block_bytes` long).
pub(crate) fn decode(format: &Format, b: &[u8], sub: usize) -> Block32 {
    let implied_min = |d: f32| format.min_per_scale.map_or(0.0, |k| k * d);
    match format.dtype {
        GgmlDType::Q4_0 => {
            let d = half(b, 0);
            Block32 { q: nibbles(&b[2..18]), d, m: implied_min(d), sub: None }
        }
        GgmlDType::Q4_1 => Block32 { q: nibbles(&b[4..20]), d: half(b, 0), m: half(b, 2), sub: None },
        GgmlDType::Q5_0 => {
            let d = half(b, 0);
            Block32 { q: with_high_bits(nibbles(&b[6..22]), &b[2..6]), d, m: implied_min(d), sub: None }
        }
        GgmlDType::Q5_1 => {
            Block32 { q: with_high_bits(nibbles(&b[8..24]), &b[4..8]), d: half(b, 0), m: half(b, 2), sub: None }
        }
        GgmlDType::Q8_0 => {
            let mut q = [0u8; BLOCK];
            q.copy_from_slice(&b[2..34]);
            Block32 { q, d: half(b, 0), m: 0.0, sub: None }
        }
        // Q4_K and Q5_K (the other formats `format_of` admits): 8 sub-blocks of 32; each
        // 64-element chunk shares 32 bytes of nibbles, low for the even sub-block and high for
        // the odd one. Q5_K's fifth bits: bit `sub` of byte `l` of its 32-byte plane belongs to
        // element `l` of sub-block `sub`.
        _ => {
            let (d_super, dmin_super) = (f16_at(b, 0), f16_at(b, 2));
            let (d, dmin) = (d_super.to_f32(), dmin_super.to_f32());
            let (sc, mn) = scale_min_k4(sub, &b[4..16]);
            let five_bits = format.dtype == GgmlDType::Q5K;
            let nibbles_at = if five_bits { 48 } else { 16 };
            let qs = &b[nibbles_at + 32 * (sub / 2)..nibbles_at + 32 * (sub / 2) + 32];
            let mut q = [0u8; BLOCK];
            for (v, &byte) in q.iter_mut().zip(qs) {
                *v = if sub.is_multiple_of(2) { byte & 0x0F } else { byte >> 4 };
            }
            if five_bits {
                for (v, &plane) in q.iter_mut().zip(&b[16..48]) {
                    *v |= (plane >> sub & 1) << 4;
                }
            }
            let factoring = SubScales { d_super, sc, dmin_super, mn };
            Block32 { q, d: d * sc as f32, m: -(dmin * mn as f32), sub: Some(factoring) }
        }
    }
}
