//! The VNNI microkernel: `kernel_avx2.rs`'s tile with `vpdpbusd`, which multiplies the 4 u8
//! weight quants of a lane by the 4 i8 activations and adds all four products to the lane's
//! i32 in one instruction. The AVX2 kernel needs `maddubs` (pairs to i16), i16 adds and a
//! `madd` with ones for the same sum; here nothing is widened and nothing can saturate.
//!
//! Both kernels compute each block's exact integer dot product per column and then run the
//! same f32 epilogue (`simd_tile.rs`: one convert, one or two fmas per row and block), so
//! their outputs are bit-identical, and batch invariance holds as for the AVX2 kernel.
//! `vpdpbusd` exists as AVX-VNNI (VEX, Alder Lake and Zen 4 on) and AVX-512 VNNI with VL
//! (EVEX, Cascade Lake on); the kernel is compiled once for each and picked at run time.

use super::activation::QuantizedRows;
use super::kernel_avx2;
use super::kernel_scalar;
use super::pack::Panel;

/// Which `vpdpbusd` encoding the CPU has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    AvxVnni,
    Avx512Vnni,
}

/// The VNNI flavour this CPU runs, if any (AVX-VNNI first: no AVX-512 frequency licence).
pub(crate) fn available() -> Option<Isa> {
    [Isa::AvxVnni, Isa::Avx512Vnni].into_iter().find(|&isa| supports(isa))
}

/// Whether this CPU can run the kernel compiled for `isa` (cached feature loads).
pub(crate) fn supports(isa: Isa) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        kernel_avx2::available()
            && match isa {
                Isa::AvxVnni => is_x86_feature_detected!("avxvnni"),
                Isa::Avx512Vnni => is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl"),
            }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        false
    }
}

/// Same contract as `kernel_scalar::tile`, which it falls back to where `isa` is missing.
pub(crate) fn tile(isa: Isa, panel: &Panel<'_>, act: &QuantizedRows, row0: usize, rows: usize, out: &mut [f32]) {
    if !kernel_avx2::in_bounds(panel, act, row0, rows, out) || !supports(isa) {
        return kernel_scalar::tile(panel, act, row0, rows, out);
    }
    #[cfg(target_arch = "x86_64")]
    kernel_avx2::by_row_tiles(rows, out, |r, n, o| {
        // SAFETY: `supports(isa)` confirmed AVX2, FMA, F16C and this `vpdpbusd` encoding, and
        // `in_bounds` bounds every pointer offset the kernel forms (rows `row0 + r .. + n`,
        // blocks `0..nb`, the panel's bytes).
        unsafe {
            match isa {
                Isa::AvxVnni => avx_vnni::tile_rows(panel, act, row0 + r, n, o),
                Isa::Avx512Vnni => avx512_vnni::tile_rows(panel, act, row0 + r, n, o),
            }
        }
    });
}

/// One kernel per encoding: the body is the same, the target features and the intrinsic differ.
macro_rules! vnni_kernel {
    ($module:ident, $features:literal, $dpbusd:ident) => {
        #[cfg(target_arch = "x86_64")]
        mod $module {
            use std::arch::x86_64::*;

            use super::super::activation::QuantizedRows;
            use super::super::pack::Panel;
            use super::super::simd_tile::{self, group, BlockDot, NIBBLE, SIGNED, UNSIGNED};
            use super::super::BLOCK;

            /// # Safety
            ///
            /// The module's features, and the bounds checked by `kernel_avx2::in_bounds` for
            /// rows `row0..row0 + n`, `n <= TILE_ROWS`.
            #[target_feature(enable = $features)]
            pub(super) unsafe fn tile_rows(
                panel: &Panel<'_>,
                act: &QuantizedRows,
                row0: usize,
                n: usize,
                o: &mut [f32],
            ) {
                simd_tile::tile_rows::<Dpbusd>(panel, act, row0, n, o)
            }

            /// `vpdpbusd` straight into the i32 lanes.
            struct Dpbusd;

            impl BlockDot for Dpbusd {
                // `r` selects the same row of `dots` and the activations in lockstep.
                #[allow(clippy::needless_range_loop)]
                #[inline(always)]
                unsafe fn dots<const R: usize, const KIND: u8>(
                    wb: *const u8,
                    x: impl Fn(usize) -> *const i8,
                    bias_offset: impl Fn(usize) -> *const i32,
                ) -> [__m256i; R] {
                    let mut dots = [_mm256_setzero_si256(); R];
                    if KIND == SIGNED {
                        // The weights run biased by 128 (below): the sums start from the
                        // `-128 * sum(x)` that takes the bias off again.
                        for r in 0..R {
                            dots[r] = _mm256_set1_epi32(*bias_offset(r));
                        }
                    }
                    if KIND == NIBBLE {
                        let low_nibbles = _mm256_set1_epi8(0x0F);
                        for h in 0..4 {
                            let pair = _mm256_loadu_si256(wb.add(h * BLOCK) as *const __m256i);
                            let lo = _mm256_and_si256(pair, low_nibbles);
                            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(pair), low_nibbles);
                            for r in 0..R {
                                dots[r] = $dpbusd(dots[r], lo, group(x(r), h));
                                dots[r] = $dpbusd(dots[r], hi, group(x(r), h + 4));
                            }
                        }
                    } else if KIND == UNSIGNED {
                        for g in 0..8 {
                            let w = simd_tile::five_bit_group(wb, g);
                            for r in 0..R {
                                dots[r] = $dpbusd(dots[r], w, group(x(r), g));
                            }
                        }
                    } else if KIND == SIGNED {
                        // `vpdpbusd` takes u8 x i8: w + 128 (w with its sign bit flipped) as
                        // u8, from sums that start at -128 x sum(x): the same integer, one
                        // instruction per row and group instead of two.
                        let bias = _mm256_set1_epi8(i8::MIN);
                        for g in 0..8 {
                            let w = _mm256_loadu_si256(wb.add(g * BLOCK) as *const __m256i);
                            let wu = _mm256_xor_si256(w, bias);
                            for r in 0..R {
                                dots[r] = $dpbusd(dots[r], wu, group(x(r), g));
                            }
                        }
                    }
                    dots
                }
            }
        }
    };
}

vnni_kernel!(avx_vnni, "avx2,fma,f16c,avxvnni", _mm256_dpbusd_avx_epi32);
vnni_kernel!(avx512_vnni, "avx2,fma,f16c,avx512vnni,avx512vl", _mm256_dpbusd_epi32);

#[cfg(test)]
mod tests {
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    use super::*;
    use crate::int8_gemm::{full_range_signed, quantize_rows, xorshift_values, PackedWeight, PANEL};

    /// Both encodings (whichever this CPU has; `Backend::Vnni256` runs only the first) against
    /// the scalar kernel, bit for bit, on every packed kind and tile height.
    #[test]
    fn each_encoding_matches_the_scalar_kernel() {
        let (n, k) = (24, 512);
        let mut values = xorshift_values(0x2545_f491_4f6c_dd1d);
        for isa in [Isa::AvxVnni, Isa::Avx512Vnni] {
            if !supports(isa) {
                eprintln!("{isa:?}: not on this CPU, not tested");
                continue;
            }
            // Q4_K and Q5_K keep their sub-block factoring, the others have f16 scales.
            for dtype in
                [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q5_0, GgmlDType::Q8_0, GgmlDType::Q4K, GgmlDType::Q5K]
            {
                let w = Tensor::from_vec(values(n * k), (n, k), &Device::Cpu).unwrap();
                let packed = PackedWeight::from_qtensor(&QTensor::quantize(&w, dtype).unwrap()).unwrap().unwrap();
                for rows in 1..=5 {
                    let act = quantize_rows(&values(rows * k), rows, k);
                    for p in 0..packed.num_panels() {
                        let panel = packed.panel(p);
                        let (mut fast, mut scalar) = (vec![0.0f32; rows * PANEL], vec![0.0f32; rows * PANEL]);
                        tile(isa, &panel, &act, 0, rows, &mut fast);
                        kernel_scalar::tile(&panel, &act, 0, rows, &mut scalar);
                        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&fast), bits(&scalar), "{isa:?} {dtype:?} {rows} rows, panel {p}");
                    }
                }
            }
            let packed = full_range_signed(n, k);
            for rows in 1..=5 {
                let act = quantize_rows(&values(rows * k), rows, k);
                let panel = packed.panel(1);
                let (mut fast, mut scalar) = (vec![0.0f32; rows * PANEL], vec![0.0f32; rows * PANEL]);
                tile(isa, &panel, &act, 0, rows, &mut fast);
                kernel_scalar::tile(&panel, &act, 0, rows, &mut scalar);
                assert_eq!(fast, scalar, "{isa:?} quants -128..=127, {rows} rows");
            }
        }
    }
}
