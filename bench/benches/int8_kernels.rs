//! The int8 GEMM's kernels side by side on the projection shapes and formats of SmolLM2-135M
//! and Qwen2.5-0.5B: the AVX2 kernel, `Backend::Vnni256` (`vpdpbusd` in ymm registers, where
//! the CPU has AVX-VNNI or AVX-512 VNNI) and `Backend::Auto` (two panels per zmm register where
//! it has AVX-512 VNNI). All give the same bits (tests/int8_gemm.rs); this measures the time.
//! Every (shape, rows) point alternates the kernels `BENCH_ROUNDS` times (default 7) and keeps
//! each one's fastest round; compare the ratios, not the absolute times.
//! Env: BENCH_ROUNDS, BENCH_ROWS (comma list, default 1,8,64,256), BENCH_JSON (output path).

mod common;

use std::time::Instant;

use common::random;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use entrobatch::model_runner::int8_gemm::{auto_kernel_name, matmul_with, Backend, PackedWeight};

/// (model, name, out, in, dtype).
const SHAPES: [(&str, &str, usize, usize, GgmlDType); 8] = [
    ("smollm2", "gate/up 1536x576", 1536, 576, GgmlDType::Q4_1),
    ("smollm2", "down 576x1536", 576, 1536, GgmlDType::Q4_1),
    ("smollm2", "lm_head 49152x576", 49152, 576, GgmlDType::Q8_0),
    ("qwen", "gate/up 4864x896", 4864, 896, GgmlDType::Q5_0),
    ("qwen", "down q4k 896x4864", 896, 4864, GgmlDType::Q4K),
    ("qwen", "down q6k 896x4864", 896, 4864, GgmlDType::Q6K),
    // Q5_K_M GGUFs' downs (a 4864-wide row is whole super-blocks; 896-wide ones fall back to Q5_1).
    ("qwen", "down q5k 896x4864", 896, 4864, GgmlDType::Q5K),
    ("qwen", "lm_head 151936x896", 151936, 896, GgmlDType::Q8_0),
];

/// Seconds per matmul: enough iterations for ~20 ms, after one warm-up call.
fn time(w: &PackedWeight, x: &[f32], rows: usize, backend: Backend) -> anyhow::Result<f64> {
    matmul_with(w, x, rows, backend)?;
    let start = Instant::now();
    let mut iters = 0u32;
    while start.elapsed().as_secs_f64() < 0.02 || iters < 2 {
        matmul_with(w, x, rows, backend)?;
        iters += 1;
    }
    Ok(start.elapsed().as_secs_f64() / iters as f64)
}

fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(7);
    let rows_list: Vec<usize> = std::env::var("BENCH_ROWS")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 8, 64, 256]);
    let auto = auto_kernel_name();
    println!("Backend::Auto runs the {auto} kernel on this CPU");
    println!(
        "{:<8} {:<20} {:>5} {:>12} {:>12} {:>12} {:>9} {:>9} {:>8}",
        "model", "shape", "rows", "avx2", "vnni256", auto, "auto/avx2", "auto/256", "GOPS"
    );
    let mut records = Vec::new();
    for (si, &(model, name, n, k, dtype)) in SHAPES.iter().enumerate() {
        let w = Tensor::from_vec(random(n * k, 7 + si as u64), (n, k), &Device::Cpu)?;
        let Some(packed) = PackedWeight::from_qtensor(&QTensor::quantize(&w, dtype)?)? else {
            anyhow::bail!("{dtype:?} is not packed by the int8 kernel");
        };
        for &rows in &rows_list {
            let x = random(rows * k, 99 + rows as u64);
            let (mut avx2, mut vnni256, mut fast) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
            for _ in 0..rounds {
                avx2 = avx2.min(time(&packed, &x, rows, Backend::Avx2)?);
                vnni256 = vnni256.min(time(&packed, &x, rows, Backend::Vnni256)?);
                fast = fast.min(time(&packed, &x, rows, Backend::Auto)?);
            }
            let gops = 2.0 * (n * k * rows) as f64 / fast / 1e9;
            println!(
                "{:<8} {:<20} {:>5} {:>10.1}us {:>10.1}us {:>10.1}us {:>9.2} {:>9.2} {:>8.1}",
                model,
                name,
                rows,
                avx2 * 1e6,
                vnni256 * 1e6,
                fast * 1e6,
                avx2 / fast,
                vnni256 / fast,
                gops
            );
            records.push(serde_json::json!({
                "model": model, "shape": name, "dtype": format!("{dtype:?}"), "rows": rows,
                "seconds": { "avx2": avx2, "vnni256": vnni256, "auto": fast }, "auto_kernel": auto,
                "speedup_auto_vs_avx2": avx2 / fast, "speedup_auto_vs_vnni256": vnni256 / fast,
                "auto_gops": gops,
            }));
        }
    }
    if let Some(path) = std::env::var_os("BENCH_JSON") {
        std::fs::write(path, serde_json::to_string_pretty(&records)?)?;
    }
    Ok(())
}
