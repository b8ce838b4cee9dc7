use clap::{Parser, Subcommand};

mod commands;

#[derive(Parser)]
#[command(name = "entrobatch", version, about = "Continuous-batching LLM decoding engine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmarks that print JSON and a short table.
    #[command(subcommand)]
    Bench(commands::bench::BenchCommand),
    /// Generate text for one or more prompts, batched together.
    Run(commands::run::RunArgs),
    /// Serve an OpenAI-compatible HTTP API (completions, chat, metrics), and Anthropic's Messages API and Ollama's API over the same engine.
    Serve(commands::serve::ServeArgs),
    /// Load-test a running server on this machine (loopback only) with streamed requests.
    Loadtest(commands::loadtest::LoadTestArgs),
    /// Draw logit entropy against varentropy per token from `run --json` output, coloured by
    /// entropix branch, with the quadrant thresholds (.svg or .png).
    PlotMetrics(commands::plot_metrics::PlotMetricsArgs),
    /// Accuracy and speed per decoding strategy on HumanEval, GSM-Symbolic or MMLU
    /// (data from `scripts/fetch-eval-data`).
    Eval(commands::eval::EvalArgs),
    /// Several systems' load-test runs (`loadtest --json` files) in one chart against rate.
    PlotSweep(commands::plot_sweep::PlotSweepArgs),
    /// Perplexity of a text file, computed as llama.cpp's llama-perplexity computes it.
    Perplexity(commands::perplexity::PerplexityArgs),
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ENTROBATCH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => commands::run::run(args),
        Command::Bench(command) => commands::bench::run_bench(command),
        Command::Serve(args) => commands::serve::run(args),
        Command::Loadtest(args) => commands::loadtest::run(args),
        Command::PlotMetrics(args) => commands::plot_metrics::run(args),
        Command::Eval(args) => commands::eval::run(args),
        Command::Perplexity(args) => commands::perplexity::run(args),
        Command::PlotSweep(args) => commands::plot_sweep::run(args),
    };
    if let Err(e) = result {
        eprintln!("error: {}", error_chain(&e));
        std::process::exit(1);
    }
}

/// The error and its causes, each said once: typed errors already quote their source in
/// their own message (`model: {0}`), so a cause the text holds is not repeated.
fn error_chain(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}
