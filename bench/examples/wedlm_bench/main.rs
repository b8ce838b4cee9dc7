//! WeDLM in the continuous batch against all-plain batches (see `wedlm.rs` beside this file).
//! `cargo run --profile test --example wedlm_bench`; env WEDLM_BENCH_SEQUENCES,
//! WEDLM_BENCH_WEDLM_SEQUENCES, WEDLM_BENCH_PROMPT_LEN, WEDLM_BENCH_OUTPUT_LEN,
//! WEDLM_BENCH_WINDOW, WEDLM_BENCH_MODEL_DIR, WEDLM_BENCH_JSON (output path).

mod wedlm;

use wedlm::{render_markdown, run, WedlmBenchConfig};

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    let d = WedlmBenchConfig::default();
    let config = WedlmBenchConfig {
        model_dir: std::env::var_os("WEDLM_BENCH_MODEL_DIR").map(Into::into).unwrap_or(d.model_dir),
        sequences: env_usize("WEDLM_BENCH_SEQUENCES", d.sequences),
        wedlm_sequences: env_usize("WEDLM_BENCH_WEDLM_SEQUENCES", d.wedlm_sequences),
        prompt_len: env_usize("WEDLM_BENCH_PROMPT_LEN", d.prompt_len),
        output_len: env_usize("WEDLM_BENCH_OUTPUT_LEN", d.output_len),
        window_size: env_usize("WEDLM_BENCH_WINDOW", d.window_size),
    };
    let reports = run(&config, |label| eprintln!("running: {label}"))?;
    let json = serde_json::to_string_pretty(&reports)?;
    println!("{json}");
    print!("{}", render_markdown(&config, &reports));
    if let Ok(path) = std::env::var("WEDLM_BENCH_JSON") {
        std::fs::write(path, &json)?;
    }
    Ok(())
}
