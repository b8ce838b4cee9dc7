//! One layer's paged attention over f16 and q8 caches, side by side, on the attention shapes of
//! SmolLM2-135M and Qwen2.5-0.5B: decode steps of many sequences (one query row each over its
//! whole context), one sequence alone (its heads split over the threads), and a prompt chunk
//! (`pROWSxCONTEXT`: one sequence's ROWS query rows after CONTEXT cached keys). Every case
//! alternates the dtypes `BENCH_ROUNDS` times (default 5) and keeps each one's fastest round;
//! compare the ratios, not the absolute times. Block tables are shuffled over the pool, as a
//! long-running server's are.
//! Env: BENCH_ROUNDS, BENCH_CASES (comma list of `ROWSxCONTEXT` or `pROWSxCONTEXT`, default
//! 64x2048,16x2048,1x8192,p256x8192).

mod common;

use std::time::Instant;

use common::random;

use entrobatch::model_runner::attention::{paged_attention, AttentionShape};
use entrobatch::model_runner::kv_cache::LayerKv;
use entrobatch::model_runner::{KvDtype, SeqSpan};

const BLOCK_SIZE: usize = 16;

/// (model, query heads, KV heads).
const MODELS: [(&str, usize, usize); 2] = [("smollm2", 9, 3), ("qwen", 14, 2)];
const HEAD_DIM: usize = 64;

struct Case {
    shape: AttentionShape,
    q: Vec<f32>,
    spans: Vec<SeqSpan>,
    cache_k: Vec<f32>,
    cache_v: Vec<f32>,
    step_k: Vec<f32>,
    step_v: Vec<f32>,
}

/// `rows` sequences decoding one token each after `context` cached tokens, or, for a prompt
/// chunk, one sequence's `rows` rows after them.
fn case(num_heads: usize, num_kv_heads: usize, rows: usize, context: usize, chunk: bool) -> Case {
    let shape = AttentionShape {
        num_heads,
        num_kv_heads,
        head_dim: HEAD_DIM,
        block_size: BLOCK_SIZE,
        scale: 1.0 / (HEAD_DIM as f32).sqrt(),
        window: None,
        kv_group: 0,
    };
    let blocks_per_seq = context.div_ceil(BLOCK_SIZE);
    let seqs = if chunk { 1 } else { rows };
    let num_blocks = seqs * blocks_per_seq;
    // A fixed shuffle of the pool (multiplication by a unit modulo the pool size).
    let stride = (1..).map(|k| 7919 * k + 1).find(|s| gcd(*s, num_blocks) == 1).unwrap_or(1);
    let spans = (0..seqs)
        .map(|r| SeqSpan {
            query_start: r,
            query_len: if chunk { rows } else { 1 },
            context_len: context,
            block_tables: vec![(0..blocks_per_seq)
                .map(|b| ((r * blocks_per_seq + b) * stride % num_blocks) as u32)
                .collect()],
            want_attn_metrics: false,
            attn_pad_to: None,
        })
        .collect();
    let kv_row = num_kv_heads * HEAD_DIM;
    // Keys and values of unit size, so the softmax spreads over many keys as a real one does.
    let scaled = |n, seed| random(n, seed).into_iter().map(|x| x * 10.0).collect::<Vec<f32>>();
    Case {
        shape,
        q: scaled(rows * num_heads * HEAD_DIM, 1),
        spans,
        cache_k: scaled(num_blocks * BLOCK_SIZE * kv_row, 2),
        cache_v: scaled(num_blocks * BLOCK_SIZE * kv_row, 3),
        step_k: scaled(rows * kv_row, 4),
        step_v: scaled(rows * kv_row, 5),
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Seconds per call: enough calls for ~0.2 s, after one warm-up call.
fn time(case: &Case, step: &LayerKv, cache: &LayerKv) -> anyhow::Result<f64> {
    paged_attention(case.shape, &case.q, step, cache, &case.spans, false)?;
    let start = Instant::now();
    let mut iters = 0u32;
    while start.elapsed().as_secs_f64() < 0.2 || iters < 2 {
        paged_attention(case.shape, &case.q, step, cache, &case.spans, false)?;
        iters += 1;
    }
    Ok(start.elapsed().as_secs_f64() / iters as f64)
}

fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let cases = std::env::var("BENCH_CASES")
        .unwrap_or_else(|_| "64x2048,16x2048,1x8192,p256x8192".into())
        .split(',')
        .map(|c| {
            let (chunk, dims) = c.trim().strip_prefix('p').map_or((false, c.trim()), |d| (true, d));
            let parsed = dims.split_once('x').and_then(|(r, k)| Some((r.parse().ok()?, k.parse().ok()?, chunk)));
            parsed.filter(|&(rows, context, _): &(usize, usize, bool)| rows > 0 && context > 0).ok_or_else(|| {
                anyhow::anyhow!("BENCH_CASES entry `{c}` is not [p]ROWSxCONTEXT with both above 0, e.g. 64x2048")
            })
        })
        .collect::<anyhow::Result<Vec<(usize, usize, bool)>>>()?;
    println!(
        "{:<8} {:>6} {:>8} {:>11} {:>11} {:>8} {:>12} {:>12}",
        "model", "rows", "context", "f16 ms", "q8 ms", "f16/q8", "f16 GB/s", "q8 GB/s"
    );
    for (model, heads, kv_heads) in MODELS {
        for &(rows, context, chunk) in &cases {
            let case = case(heads, kv_heads, rows, context, chunk);
            let build = |dtype| {
                let cache = LayerKv::from_rows(
                    dtype,
                    HEAD_DIM,
                    kv_heads * HEAD_DIM,
                    case.cache_k.clone(),
                    case.cache_v.clone(),
                    None,
                );
                let step = LayerKv::from_rows(
                    dtype,
                    HEAD_DIM,
                    kv_heads * HEAD_DIM,
                    case.step_k.clone(),
                    case.step_v.clone(),
                    None,
                );
                (step, cache)
            };
            let (f16, q8) = (build(KvDtype::F16), build(KvDtype::Q8));
            let (mut best_f16, mut best_q8) = (f64::MAX, f64::MAX);
            for _ in 0..rounds {
                best_f16 = best_f16.min(time(&case, &f16.0, &f16.1)?);
                best_q8 = best_q8.min(time(&case, &q8.0, &q8.1)?);
            }
            // Bytes of K and V the step reads (every cached key once per row).
            let values = (rows * context * kv_heads * HEAD_DIM * 2) as f64;
            let (f16_bytes, q8_bytes) = (values * 2.0, values * (1.0 + 2.0 / 32.0));
            println!(
                "{:<8} {:>6} {:>8} {:>11.3} {:>11.3} {:>7.2}x {:>12.1} {:>12.1}",
                model,
                if chunk { format!("p{rows}") } else { rows.to_string() },
                context,
                best_f16 * 1e3,
                best_q8 * 1e3,
                best_f16 / best_q8,
                f16_bytes / best_f16 / 1e9,
                q8_bytes / best_q8 / 1e9,
            );
        }
    }
    Ok(())
}
