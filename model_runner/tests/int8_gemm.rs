//! The int8 kernel against a dense f64 re-computation (candle's own dequantized weights times
//! the Q8-rounded activations), its scalar twin, and its batch invariance.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use entrobatch_model_runner::int8_gemm::{
    auto_kernel_name, matmul, matmul_into, matmul_many, matmul_with, Backend, Int8GemmError, PackedWeight,
};

/// Deterministic pseudo-random values in [-1, 1) (xorshift), with occasional outliers so
/// block scales vary a lot, as real activations do.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let v = (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            if i % 97 == 5 {
                v * 20.0
            } else {
                v
            }
        })
        .collect()
}

fn quantized(dtype: GgmlDType, n: usize, k: usize, seed: u64) -> QTensor {
    let w = Tensor::from_vec(values(n * k, seed), (n, k), &Device::Cpu).expect("tensor");
    QTensor::quantize(&w, dtype).expect("quantize")
}

/// Activations as the kernel sees them, re-derived independently: per 32-block
/// `d = max|x| / 127`, `q = round(x / d)`.
fn q8_rounded(x: &[f32]) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for b in x.chunks(32) {
        let d = b.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        out.extend(b.iter().map(|v| (v * id).round() * d));
    }
    out
}

/// Checks the kernel on `rows x k` activations against the f64 product of candle's
/// dequantized weights and the Q8-rounded activations.
fn check_against_dense(dtype: GgmlDType, n: usize, k: usize, rows: usize) {
    let q = quantized(dtype, n, k, (n * 31 + k) as u64);
    let packed = PackedWeight::from_qtensor(&q).expect("pack").expect("supported format");
    let w = q.dequantize(&Device::Cpu).expect("dequantize").flatten_all().unwrap().to_vec1::<f32>().unwrap();
    // The repacking is exact: the kernel multiplies the very weights candle decodes.
    for (i, (a, b)) in packed.dequantize().iter().zip(&w).enumerate() {
        assert!((a - b).abs() <= 1e-6 * b.abs().max(1e-3), "{dtype:?} weight {i}: {a} vs {b}");
    }
    let x = values(rows * k, (rows * 7 + n) as u64);
    let xq = q8_rounded(&x);
    let y = matmul(&packed, &x, rows).expect("matmul");
    assert_eq!(y.len(), rows * n);
    for r in 0..rows {
        for c in 0..n {
            let (mut exact, mut magnitude) = (0.0f64, 0.0f64);
            for j in 0..k {
                let p = w[c * k + j] as f64 * xq[r * k + j] as f64;
                exact += p;
                magnitude += p.abs();
            }
            let got = y[r * n + c] as f64;
            // f32 accumulation over k/32 blocks: a few ulps of the magnitude of the terms.
            let tol = 2e-6 * magnitude + 1e-6;
            assert!(
                (got - exact).abs() <= tol,
                "{dtype:?} n={n} k={k} rows={rows} ({r},{c}): {got} vs {exact} (tol {tol})"
            );
        }
    }
}

#[test]
fn q4_1_matches_dense_recomputation_on_odd_shapes() {
    for rows in [1, 3, 17, 64] {
        for (n, k) in [(13, 64), (70, 576), (4, 32)] {
            check_against_dense(GgmlDType::Q4_1, n, k, rows);
        }
    }
}

#[test]
fn q8_0_matches_dense_recomputation_on_odd_shapes() {
    for rows in [1, 3, 17, 64] {
        for (n, k) in [(13, 64), (70, 576), (1, 96)] {
            check_against_dense(GgmlDType::Q8_0, n, k, rows);
        }
    }
}

#[test]
fn other_supported_formats_match_dense_recomputation() {
    for dtype in [GgmlDType::Q4_0, GgmlDType::Q5_0, GgmlDType::Q5_1] {
        check_against_dense(dtype, 21, 128, 5);
    }
    check_against_dense(GgmlDType::Q4K, 22, 512, 5);
    check_against_dense(GgmlDType::Q5K, 22, 512, 5);
}

/// Q6_K (half of Qwen2.5-Coder Q4_K_M's down projections) is re-quantized to 8 bits per 32
/// elements: each packed weight lies within half a Q8 step (max|block| / 254) of candle's own
/// Q6_K decoding, and the kernel multiplies exactly those packed weights.
#[test]
fn q6_k_is_requantized_within_half_a_q8_step() {
    let (n, k, rows) = (19, 512, 7);
    let q = quantized(GgmlDType::Q6K, n, k, 1);
    let packed = PackedWeight::from_qtensor(&q).expect("pack").expect("Q6_K is packed");
    let w = q.dequantize(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let p = packed.dequantize();
    let mut worst = 0.0f32;
    for (block_w, block_p) in w.chunks(32).zip(p.chunks(32)) {
        let half_step = block_w.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 254.0;
        for (a, b) in block_w.iter().zip(block_p) {
            assert!((a - b).abs() <= half_step * 1.0001 + 1e-9, "{a} re-quantized to {b}");
            worst = worst.max((a - b).abs());
        }
    }
    assert!(worst > 0.0, "8-bit re-quantization of 6-bit values cannot be lossless here");
    let x = values(rows * k, 9);
    let xq = q8_rounded(&x);
    let y = matmul(&packed, &x, rows).expect("matmul");
    for r in 0..rows {
        for c in 0..n {
            let exact: f64 = (0..k).map(|j| p[c * k + j] as f64 * xq[r * k + j] as f64).sum();
            let magnitude: f64 = (0..k).map(|j| (p[c * k + j] as f64 * xq[r * k + j] as f64).abs()).sum();
            let got = y[r * n + c] as f64;
            assert!((got - exact).abs() <= 2e-6 * magnitude + 1e-6, "({r},{c}): {got} vs {exact}");
        }
    }
}

#[test]
fn unsupported_formats_are_declined_not_misread() {
    let q = quantized(GgmlDType::F16, 8, 256, 1);
    assert!(PackedWeight::from_qtensor(&q).expect("no error").is_none());
}

/// Packed weights are as compact as the GGUF's blocks, which is what a batch-1 step streams: a
/// 32-element block's quants at their own width (Q5_0's fifth bits apart from its nibbles),
/// plus its scale and min in f16 where the GGUF has them in f16, no min at all where the format
/// derives it from the scale (Q4_0's -8d, Q5_0's -16d), and Q4_K's and Q5_K's scales and mins
/// as they factor them (a u8 each per 32 elements, times an f16 each per 256: the GGUF's 6-bit
/// integers take a byte). Re-quantized Q6_K keeps an f32 scale per 32.
#[test]
fn packed_weights_are_as_compact_as_the_gguf() {
    let (n, k) = (16, 512);
    let super_blocks = n * k / 256;
    // Bytes per 256 elements (8 blocks of 32).
    for (dtype, bytes) in [
        (GgmlDType::Q4_0, 8 * (16 + 2)),
        (GgmlDType::Q4_1, 8 * (16 + 2 + 2)),
        (GgmlDType::Q5_0, 8 * (16 + 4 + 2)),
        (GgmlDType::Q5_1, 8 * (16 + 4 + 2 + 2)),
        (GgmlDType::Q8_0, 8 * (32 + 2)),
        (GgmlDType::Q4K, 8 * (16 + 1 + 1) + 2 + 2),
        (GgmlDType::Q5K, 8 * (16 + 4 + 1 + 1) + 2 + 2),
        (GgmlDType::Q6K, 8 * (32 + 4)),
    ] {
        let packed = PackedWeight::from_qtensor(&quantized(dtype, n, k, 7)).unwrap().unwrap();
        assert_eq!(packed.packed_bytes(), super_blocks * bytes, "{dtype:?}");
    }
}

#[test]
fn wrong_activation_length_is_an_error() {
    let packed = PackedWeight::from_qtensor(&quantized(GgmlDType::Q4_1, 8, 64, 2)).unwrap().unwrap();
    let err = matmul(&packed, &[0.0; 63], 1).unwrap_err();
    assert_eq!(err, Int8GemmError::ShapeMismatch { rows: 1, cols: 64, got: 63 });
}

/// 512-bit VNNI (`Auto` where the CPU has AVX-512 VNNI), 256-bit VNNI (`Vnni256` where it has
/// VNNI), AVX2 and the scalar kernel give the same bits, for each packed kind (nibble: Q4_0,
/// Q4_1, Q4_K; unsigned: Q5_0, Q5_K; signed: Q8_0, re-quantized Q6_K), every tile height (11
/// rows = 4 + 4 + 3), and odd panel counts (37 columns: 5 panels, the last 5 columns wide;
/// 805 columns: 101 panels, so whatever the thread count the parallel tasks' runs are longer
/// than two, their panels paired across the run's halves, and the last run is odd).
#[test]
fn every_kernel_is_bit_identical() {
    eprintln!("Backend::Auto runs the {} kernel here", auto_kernel_name());
    for dtype in [
        GgmlDType::Q4_0,
        GgmlDType::Q4_1,
        GgmlDType::Q4K,
        GgmlDType::Q5_0,
        GgmlDType::Q5K,
        GgmlDType::Q6K,
        GgmlDType::Q8_0,
    ] {
        for (n, k) in [(37, 512), (805, 256)] {
            check_kernels_agree(dtype, n, k);
        }
    }
}

fn check_kernels_agree(dtype: GgmlDType, n: usize, k: usize) {
    let packed = PackedWeight::from_qtensor(&quantized(dtype, n, k, 3)).unwrap().unwrap();
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    for rows in [1, 2, 3, 11] {
        let x = values(rows * k, 4);
        let scalar = bits(&matmul_with(&packed, &x, rows, Backend::Scalar).unwrap());
        for backend in [Backend::Auto, Backend::Vnni256, Backend::Avx2] {
            let fast = matmul_with(&packed, &x, rows, backend).unwrap();
            assert_eq!(bits(&fast), scalar, "{dtype:?} {n} x {k}, {rows} rows: {backend:?} vs scalar");
        }
    }
}

/// A row's output bits do not depend on the batch: alone, inside 37 rows, or in a sub-batch
/// that puts it in a different tile position.
#[test]
fn rows_are_bit_identical_alone_and_inside_a_batch() {
    for dtype in [GgmlDType::Q4_1, GgmlDType::Q8_0] {
        let (n, k, rows) = (70, 576, 37);
        let packed = PackedWeight::from_qtensor(&quantized(dtype, n, k, 5)).unwrap().unwrap();
        let x = values(rows * k, 6);
        let batch = matmul(&packed, &x, rows).unwrap();
        for r in 0..rows {
            let alone = matmul(&packed, &x[r * k..(r + 1) * k], 1).unwrap();
            assert_eq!(
                alone.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                batch[r * n..(r + 1) * n].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{dtype:?} row {r}"
            );
        }
        // Rows 5..9 as a 4-row batch: row 5 is now a tile's first row instead of its third.
        let sub = matmul(&packed, &x[5 * k..9 * k], 4).unwrap();
        assert_eq!(
            sub.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            batch[5 * n..9 * n].iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }
}

/// Projections of one input fused into one call (q/k/v, gate/up) give each weight's own bits,
/// on the single-threaded path (one row) and the parallel one (37 rows).
#[test]
fn fused_projections_match_separate_calls() {
    let k = 512;
    let weights: Vec<PackedWeight> = [(GgmlDType::Q4_1, 70), (GgmlDType::Q8_0, 12), (GgmlDType::Q4K, 36)]
        .iter()
        .enumerate()
        .map(|(i, &(dtype, n))| PackedWeight::from_qtensor(&quantized(dtype, n, k, 20 + i as u64)).unwrap().unwrap())
        .collect();
    let refs: Vec<&PackedWeight> = weights.iter().collect();
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    for rows in [1, 37] {
        let x = values(rows * k, 21);
        let fused = matmul_many(&refs, &x, rows).unwrap();
        assert_eq!(fused.len(), weights.len());
        for (w, y) in weights.iter().zip(&fused) {
            assert_eq!(bits(y), bits(&matmul(w, &x, rows).unwrap()), "rows {rows}, n {}", w.out_features());
        }
    }
    let narrow = PackedWeight::from_qtensor(&quantized(GgmlDType::Q4_1, 8, 64, 22)).unwrap().unwrap();
    let err = matmul_many(&[&weights[0], &narrow], &values(k, 23), 1).unwrap_err();
    assert_eq!(err, Int8GemmError::ShapeMismatch { rows: 1, cols: 64, got: k });
}

/// A reused output allocation (the engine hands each step's logits back for the next) gives
/// the same bits as a fresh one, whether the old contents were longer, shorter, or garbage.
#[test]
fn a_reused_output_buffer_gives_fresh_results() {
    let (n, k) = (70, 576);
    let packed = PackedWeight::from_qtensor(&quantized(GgmlDType::Q8_0, n, k, 30)).unwrap().unwrap();
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    let mut buffer = vec![f32::NAN; 3 * n * 40];
    for rows in [37, 1, 9, 64] {
        let x = values(rows * k, 31 + rows as u64);
        let fresh = matmul(&packed, &x, rows).unwrap();
        buffer = matmul_into(&packed, &x, rows, Backend::Auto, buffer).unwrap();
        assert_eq!(bits(&buffer), bits(&fresh), "{rows} rows");
    }
}
