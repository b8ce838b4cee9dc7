//! 64 requests of 128 prompt + 128 output tokens (greedy, ignore EOS) through the engine, and
//! the same requests one at a time through candle-transformers' model, in one process.
//! Env: BENCH_MODEL, BENCH_REQUESTS, BENCH_PROMPT_LEN, BENCH_OUTPUT_LEN, BENCH_CONCURRENCY,
//! BENCH_BASELINE_REQUESTS, BENCH_JSON (output path).
//!
//! BENCH_STRATEGIES=mti instead compares decoding strategies on the same requests (default
//! 32 x (64 in + 64 out), concurrency 32): plain, MTI at each BENCH_MTI_THRESHOLDS
//! (default -1,0.5,1.0,2.0,3.0,4.0,inf) with BENCH_MTI_SCALE (default 1.5), plain again; prompts are
//! windows of English prose (BENCH_MTI_PROMPTS=synthetic for the random-token ones); every
//! run is repeated BENCH_ROUNDS (default 2) times in turn and keeps its fastest round.
//!
//! BENCH_STRATEGIES=entropix: the same requests all plain, all entropix (v1 defaults), plain
//! again, BENCH_ROUNDS times alternating (default 1; 32 x (64 in + 64 out), concurrency 32),
//! plus the entropix branch counts.
//! BENCH_DECODING=plain|entropix sets the strategy of every request of the single run.

use std::path::PathBuf;

use entrobatch_bench::strategy_compare;
use entrobatch_bench::throughput::{render_table, run, ThroughputConfig};

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    let model = std::env::var_os("BENCH_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(entrobatch::DEFAULT_MODEL_PATH));
    if std::env::var("BENCH_STRATEGIES").as_deref() == Ok("mti") {
        return compare_mti(model);
    }
    if std::env::var("BENCH_STRATEGIES").as_deref() == Ok("entropix") {
        return compare_entropix(model);
    }
    let config = ThroughputConfig {
        model,
        requests: env_usize("BENCH_REQUESTS", 64),
        prompt_len: env_usize("BENCH_PROMPT_LEN", 128),
        output_len: env_usize("BENCH_OUTPUT_LEN", 128),
        concurrency: env_usize("BENCH_CONCURRENCY", 64),
        baseline_requests: env_usize("BENCH_BASELINE_REQUESTS", 8),
        engine: None,
        decoding: decoding_from_env()?,
        limits: false,
        warm_prefix: false,
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

fn compare_mti(model: PathBuf) -> anyhow::Result<()> {
    let config = ThroughputConfig {
        model,
        requests: env_usize("BENCH_REQUESTS", 32),
        prompt_len: env_usize("BENCH_PROMPT_LEN", 64),
        output_len: env_usize("BENCH_OUTPUT_LEN", 64),
        concurrency: env_usize("BENCH_CONCURRENCY", 32),
        baseline_requests: 0,
        engine: None,
        decoding: entrobatch::Decoding::Plain,
        limits: false,
        warm_prefix: false,
    };
    let thresholds: Vec<f32> = std::env::var("BENCH_MTI_THRESHOLDS")
        .unwrap_or_else(|_| "-1,0.5,1.0,2.0,3.0,4.0,inf".into())
        .split(',')
        .map(|t| t.trim().parse())
        .collect::<Result<_, _>>()?;
    let scale = std::env::var("BENCH_MTI_SCALE").ok().and_then(|v| v.parse().ok()).unwrap_or(1.5);
    let runs = strategy_compare::mti_runs(&thresholds, scale);
    let prompts = match std::env::var("BENCH_MTI_PROMPTS").as_deref() {
        Ok("synthetic") => None,
        _ => Some(strategy_compare::text_prompts(&config.model, config.requests, config.prompt_len)?),
    };
    let rounds = env_usize("BENCH_ROUNDS", 2);
    let results =
        strategy_compare::compare_on(&config, prompts.as_deref(), &runs, rounds, |label| eprintln!("running {label}"))?;
    let json = serde_json::to_string_pretty(&results)?;
    print!("{}", strategy_compare::render(&results));
    if let Ok(path) = std::env::var("BENCH_JSON") {
        std::fs::write(&path, &json)?;
    }
    Ok(())
}

/// BENCH_DECODING: the strategy every request of the single run uses (default plain).
fn decoding_from_env() -> anyhow::Result<entrobatch::Decoding> {
    match std::env::var("BENCH_DECODING").as_deref() {
        Err(_) | Ok("plain") => Ok(entrobatch::Decoding::Plain),
        Ok("entropix") => Ok(entrobatch::Decoding::Entropix(Default::default())),
        Ok(other) => anyhow::bail!("BENCH_DECODING={other}: expected plain or entropix"),
    }
}

fn compare_entropix(model: PathBuf) -> anyhow::Result<()> {
    use entrobatch::Decoding;
    let config = ThroughputConfig {
        model,
        requests: env_usize("BENCH_REQUESTS", 32),
        prompt_len: env_usize("BENCH_PROMPT_LEN", 64),
        output_len: env_usize("BENCH_OUTPUT_LEN", 64),
        concurrency: env_usize("BENCH_CONCURRENCY", 32),
        baseline_requests: 0,
        engine: None,
        decoding: Decoding::Plain,
        limits: false,
        warm_prefix: false,
    };
    // Alternating rounds on a shared machine: plain, entropix, ..., plain.
    let rounds = env_usize("BENCH_ROUNDS", 1).max(1);
    let mut runs = Vec::new();
    for r in 1..=rounds {
        runs.push((format!("plain #{r}"), Decoding::Plain));
        runs.push((format!("entropix #{r}"), Decoding::Entropix(Default::default())));
    }
    runs.push((format!("plain #{}", rounds + 1), Decoding::Plain));
    let results = strategy_compare::compare(&config, &runs, |label| eprintln!("running {label}"))?;
    print!("{}", strategy_compare::render(&results));
    let entropix: Vec<f64> =
        results.iter().filter(|r| r.report.entropix_branches.is_some()).map(|r| r.relative_to_plain).collect();
    let mean = entropix.iter().sum::<f64>() / entropix.len().max(1) as f64;
    println!("entropix time per output token vs plain: {mean:.3}x (mean of {} runs)", entropix.len());
    for r in &results {
        if let Some(branches) = &r.report.entropix_branches {
            let total: usize = branches.values().sum();
            let parts: Vec<String> = branches
                .iter()
                .map(|(b, n)| format!("{b} {n} ({:.1}%)", 100.0 * *n as f64 / total.max(1) as f64))
                .collect();
            println!("{} branches: {}", r.label, parts.join(", "));
        }
    }
    if let Ok(path) = std::env::var("BENCH_JSON") {
        std::fs::write(&path, serde_json::to_string_pretty(&results)?)?;
    }
    Ok(())
}
