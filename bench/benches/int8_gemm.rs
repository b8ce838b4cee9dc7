//! Projection matmuls of SmolLM2-135M's (or, with `BENCH_SHAPES=qwen`, Qwen2.5-0.5B's) shapes
//! and GGUF formats in the three `MatmulMode`s, side by side in one
//! process: candle's quantized kernels, the f32 GEMM of `DenseAbove` (forced for every row
//! count here), and the int8 kernel. Weights are random values quantized like the GGUF
//! (Q4_1 projections, Q8_0 lm_head). Every (shape, rows) point times the three modes in turn,
//! `BENCH_ROUNDS` times (default 5), and keeps each mode's fastest round (the least disturbed by
//! other load on the machine); compare the ratios, not the absolute times.
//! Env: BENCH_ROUNDS, BENCH_ROWS (comma list, default 1,8,32,64,256), BENCH_JSON (output path),
//! BENCH_SHAPES (smollm2, the default, or qwen).

mod common;

use std::time::Instant;

use common::random;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use entrobatch::model_runner::linear::{Linear, MatmulMode};

const MODES: [(&str, MatmulMode); 3] = [
    ("quantized", MatmulMode::Quantized),
    ("dense_f32", MatmulMode::DenseAbove { min_rows: 0 }),
    ("int8", MatmulMode::Int8),
];

/// (name, out, in, dtype, count per layer).
type Shape = (&'static str, usize, usize, GgmlDType, f64);

/// SmolLM2-135M Q4_1: Q4_1 projections, Q8_0 lm_head.
const SMOLLM2: [Shape; 5] = [
    ("q/o 576x576", 576, 576, GgmlDType::Q4_1, 2.0),
    ("k/v 192x576", 192, 576, GgmlDType::Q4_1, 2.0),
    ("gate/up 1536x576", 1536, 576, GgmlDType::Q4_1, 2.0),
    ("down 576x1536", 576, 1536, GgmlDType::Q4_1, 1.0),
    ("lm_head 49152x576", 49152, 576, GgmlDType::Q8_0, 0.0),
];

/// Qwen2.5-Coder-0.5B Q4_K_M: Q5_0 projections (half the v's are Q8_0, counted as Q5_0 here),
/// half the downs Q4_K and half Q6_K, Q8_0 lm_head.
const QWEN: [Shape; 6] = [
    ("q/o 896x896", 896, 896, GgmlDType::Q5_0, 2.0),
    ("k/v 128x896", 128, 896, GgmlDType::Q5_0, 2.0),
    ("gate/up 4864x896", 4864, 896, GgmlDType::Q5_0, 2.0),
    ("down q4k 896x4864", 896, 4864, GgmlDType::Q4K, 0.5),
    ("down q6k 896x4864", 896, 4864, GgmlDType::Q6K, 0.5),
    ("lm_head 151936x896", 151936, 896, GgmlDType::Q8_0, 0.0),
];

/// Seconds per forward: enough iterations for ~20 ms, after one warm-up call.
fn time(linear: &Linear, x: &[f32], rows: usize) -> anyhow::Result<f64> {
    linear.forward(x, rows)?;
    let start = Instant::now();
    let mut iters = 0u32;
    while start.elapsed().as_secs_f64() < 0.02 || iters < 2 {
        linear.forward(x, rows)?;
        iters += 1;
    }
    Ok(start.elapsed().as_secs_f64() / iters as f64)
}

fn fastest(v: Vec<f64>) -> f64 {
    v.into_iter().fold(f64::INFINITY, f64::min)
}

fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let rows_list: Vec<usize> = std::env::var("BENCH_ROWS")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 8, 32, 64, 256]);
    let shapes: &[Shape] = match std::env::var("BENCH_SHAPES").as_deref() {
        Ok("qwen") => &QWEN,
        _ => &SMOLLM2,
    };
    let mut records = Vec::new();
    // Per-row-count totals over one transformer layer (weighted by per-layer counts).
    let mut layer = vec![[0.0f64; 3]; rows_list.len()];
    println!(
        "{:<20} {:>5} {:>12} {:>12} {:>12} {:>9} {:>9} {:>9}",
        "shape", "rows", "quantized", "dense_f32", "int8", "q/int8", "f32/int8", "int8 GOPS"
    );
    for (si, &(name, n, k, dtype, per_layer)) in shapes.iter().enumerate() {
        let w = Tensor::from_vec(random(n * k, 7 + si as u64), (n, k), &Device::Cpu)?;
        let linears = MODES
            .iter()
            .map(|(_, mode)| Ok(Linear::new(QTensor::quantize(&w, dtype)?, None, *mode)?))
            .collect::<anyhow::Result<Vec<_>>>()?;
        for (ri, &rows) in rows_list.iter().enumerate() {
            let x = random(rows * k, 99 + rows as u64);
            let mut samples = vec![Vec::new(); 3];
            for _ in 0..rounds {
                for (m, linear) in linears.iter().enumerate() {
                    samples[m].push(time(linear, &x, rows)?);
                }
            }
            let t: Vec<f64> = samples.into_iter().map(fastest).collect();
            for m in 0..3 {
                layer[ri][m] += t[m] * per_layer;
            }
            let gops = 2.0 * (n * k * rows) as f64 / t[2] / 1e9;
            println!(
                "{:<20} {:>5} {:>10.1}us {:>10.1}us {:>10.1}us {:>9.2} {:>9.2} {:>9.1}",
                name,
                rows,
                t[0] * 1e6,
                t[1] * 1e6,
                t[2] * 1e6,
                t[0] / t[2],
                t[1] / t[2],
                gops
            );
            records.push(serde_json::json!({
                "shape": name, "out": n, "in": k, "dtype": format!("{dtype:?}"), "rows": rows,
                "seconds": { "quantized": t[0], "dense_f32": t[1], "int8": t[2] },
                "speedup_int8_vs_quantized": t[0] / t[2], "speedup_int8_vs_dense_f32": t[1] / t[2],
                "int8_gops": gops,
            }));
        }
    }
    println!("\none layer's projections (each shape times its count per layer):");
    for (ri, &rows) in rows_list.iter().enumerate() {
        let t = layer[ri];
        println!(
            "{:<20} {:>5} {:>10.1}us {:>10.1}us {:>10.1}us {:>9.2} {:>9.2}",
            "layer",
            rows,
            t[0] * 1e6,
            t[1] * 1e6,
            t[2] * 1e6,
            t[0] / t[2],
            t[1] / t[2]
        );
        records.push(serde_json::json!({
            "shape": "layer", "rows": rows,
            "seconds": { "quantized": t[0], "dense_f32": t[1], "int8": t[2] },
            "speedup_int8_vs_quantized": t[0] / t[2], "speedup_int8_vs_dense_f32": t[1] / t[2],
        }));
    }
    let json = serde_json::to_string_pretty(&records)?;
    match std::env::var_os("BENCH_JSON") {
        Some(path) => std::fs::write(path, json)?,
        None => println!("{json}"),
    }
    Ok(())
}
