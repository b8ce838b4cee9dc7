//! 64 requests of 128 prompt + 128 output tokens (greedy, ignore EOS) through the engine, and
//! the same requests one at a time through candle-transformers' model, in one process.
//! Env: BENCH_MODEL, BENCH_REQUESTS, BENCH_PROMPT_LEN, BENCH_OUTPUT_LEN, BENCH_CONCURRENCY,
//! BENCH_BASELINE_REQUESTS, BENCH_JSON (output path).

use std::path::PathBuf;

use entrobatch::bench::throughput::{render_table, run, ThroughputConfig};

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    let model = std::env::var_os("BENCH_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(entrobatch::DEFAULT_MODEL_PATH));
    let config = ThroughputConfig {
        model,
        requests: env_usize("BENCH_REQUESTS", 64),
        prompt_len: env_usize("BENCH_PROMPT_LEN", 128),
        output_len: env_usize("BENCH_OUTPUT_LEN", 128),
        concurrency: env_usize("BENCH_CONCURRENCY", 64),
        baseline_requests: env_usize("BENCH_BASELINE_REQUESTS", 8),
        engine: None,
    };
    let report = run(&config, |_| {})?;
    let json = serde_json::to_string_pretty(&report)?;
    println!("{json}");
    print!("{}", render_table(&report));
    if let Ok(path) = std::env::var("BENCH_JSON") {
        std::fs::write(&path, &json)?;
    }
    Ok(())
}
