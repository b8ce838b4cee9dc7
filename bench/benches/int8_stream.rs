//! Batch-1 decode's projections alone, against the memory they read: every weight of a GGUF
//! packed as the engine packs it, multiplied by one row in the forward's order (q/k/v
//! together, o, gate/up together, down, per layer, then the lm_head) on a worker of the pool
//! with the others kept awake (`with_hot_workers`, as `ModelRunner::execute` runs a forward),
//! and, alternating with it, one parallel read of as many bytes (`machine_limits::ReadBuffer`:
//! memory mapped as the weights are, two streams per thread). The ratio of the two times is
//! what a faster kernel could still gain at batch 1; the per-projection lines say where.
//! Env: BENCH_MODEL (GGUF path, default the README's SmolLM2), BENCH_TOKENS (default 200).

use std::time::Instant;

use candle_core::quantized::gguf_file;
use candle_core::Device;
use entrobatch::model_runner::hot_workers::with_hot_workers;
use entrobatch::model_runner::int8_gemm::{matmul_many, PackedWeight};
use entrobatch_bench::machine_limits::ReadBuffer;

const KINDS: [&str; 5] = ["q/k/v", "o", "gate/up", "down", "lm_head"];

fn main() -> anyhow::Result<()> {
    let path = std::env::var("BENCH_MODEL")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../models/SmolLM2-135M-Instruct.Q4_1.gguf").into());
    let tokens: usize = std::env::var("BENCH_TOKENS").ok().and_then(|v| v.parse().ok()).unwrap_or(200).max(2);
    let mut file = std::fs::File::open(&path)?;
    let content = gguf_file::Content::read(&mut file)?;
    let mut load = |name: &str| -> anyhow::Result<PackedWeight> {
        let q = content.tensor(&mut file, name, &Device::Cpu)?;
        PackedWeight::from_qtensor(&q)?.ok_or_else(|| anyhow::anyhow!("{name} is not packed by the int8 kernel"))
    };
    // (kind, weights multiplied together), in the forward's order.
    let mut groups: Vec<(usize, Vec<PackedWeight>)> = Vec::new();
    let layers = (0..).take_while(|l| content.tensor_infos.contains_key(&format!("blk.{l}.attn_q.weight"))).count();
    for l in 0..layers {
        let mut layer = |names: &[&str]| -> anyhow::Result<Vec<PackedWeight>> {
            names.iter().map(|n| load(&format!("blk.{l}.{n}.weight"))).collect()
        };
        let qkv = layer(&["attn_q", "attn_k", "attn_v"])?;
        let o = layer(&["attn_output"])?;
        let gate_up = layer(&["ffn_gate", "ffn_up"])?;
        let down = layer(&["ffn_down"])?;
        groups.extend([(0, qkv), (1, o), (2, gate_up), (3, down)]);
    }
    let head = if content.tensor_infos.contains_key("output.weight") { "output.weight" } else { "token_embd.weight" };
    groups.push((4, vec![load(head)?]));
    let bytes_of = |kind: usize| -> usize {
        groups.iter().filter(|(k, _)| *k == kind).flat_map(|(_, g)| g).map(|w| w.packed_bytes()).sum()
    };
    let bytes: usize = (0..KINDS.len()).map(bytes_of).sum();
    let inputs: Vec<Vec<f32>> = groups
        .iter()
        .map(|(_, g)| (0..g[0].in_features()).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect())
        .collect();
    let plain = ReadBuffer::new(bytes)?;

    let (mut best_gemm, mut best_read) = (f64::MAX, f64::MAX);
    let mut per_kind = [0.0f64; KINDS.len()];
    for round in 0..tokens {
        let start = Instant::now();
        let spent = with_hot_workers(|| -> anyhow::Result<[f64; KINDS.len()]> {
            let mut spent = [0.0f64; KINDS.len()];
            for ((kind, group), x) in groups.iter().zip(&inputs) {
                let refs: Vec<&PackedWeight> = group.iter().collect();
                let t = Instant::now();
                std::hint::black_box(matmul_many(&refs, x, 1)?);
                spent[*kind] += t.elapsed().as_secs_f64();
            }
            Ok(spent)
        })?;
        let gemm = start.elapsed().as_secs_f64();
        let read = with_hot_workers(|| plain.read_once());
        // The first round pages the buffers in.
        if round > 0 {
            best_gemm = best_gemm.min(gemm);
            best_read = best_read.min(read);
            per_kind.iter_mut().zip(spent).for_each(|(total, t)| *total += t);
        }
    }
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    let gbs = |b: usize, t: f64| b as f64 / t / 1e9;
    println!(
        "{path}: {layers} layers, {:.1} MiB of packed weights a token, {} threads",
        mib(bytes),
        rayon::current_num_threads()
    );
    println!(
        "best of {} tokens: projections {:.3} ms ({:.1} GB/s), plain read {:.3} ms ({:.1} GB/s), projections / read {:.2}",
        tokens - 1,
        best_gemm * 1e3,
        gbs(bytes, best_gemm),
        best_read * 1e3,
        gbs(bytes, best_read),
        best_gemm / best_read
    );
    println!("{:<8} {:>10} {:>10} {:>8}", "weight", "MiB", "ms/token", "GB/s");
    for (kind, name) in KINDS.iter().enumerate() {
        let t = per_kind[kind] / (tokens - 1) as f64;
        println!("{name:<8} {:>10.1} {:>10.3} {:>8.1}", mib(bytes_of(kind)), t * 1e3, gbs(bytes_of(kind), t));
    }
    Ok(())
}
