//! Which vector instructions attention over the f16 and 8-bit caches uses (`attention_f16`,
//! `attention_q8`), picked once at run time like the projections' kernels.

use std::sync::OnceLock;

use crate::attention_q8_simd as support;

/// Which instructions the f16 and 8-bit caches' kernels use; all give the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvKernel {
    Scalar,
    /// 256-bit registers: `pmaddubsw` + `pmaddwd` for q8, F16C + FMA for f16.
    Avx2,
    /// As `Avx2`, with q8's products by `vpdpbusd`, VEX encoded (Alder Lake, Zen 4 and later).
    AvxVnni,
    /// 512-bit registers: `vpdpbusd` for q8 (AVX-512 VNNI), AVX-512F conversions for f16.
    Avx512Vnni,
}

impl KvKernel {
    pub const ALL: [KvKernel; 4] = [KvKernel::Scalar, KvKernel::Avx2, KvKernel::AvxVnni, KvKernel::Avx512Vnni];

    /// The fastest kernel this CPU runs, decided once.
    pub fn detect() -> Self {
        static KERNEL: OnceLock<KvKernel> = OnceLock::new();
        *KERNEL.get_or_init(|| {
            [KvKernel::Avx512Vnni, KvKernel::AvxVnni, KvKernel::Avx2]
                .into_iter()
                .find(|k| k.supported())
                .unwrap_or(KvKernel::Scalar)
        })
    }

    pub fn supported(self) -> bool {
        match self {
            KvKernel::Scalar => true,
            KvKernel::Avx2 => support::supports_avx2(),
            KvKernel::AvxVnni => support::supports_avx_vnni(),
            KvKernel::Avx512Vnni => support::supports_avx512_vnni(),
        }
    }
}
