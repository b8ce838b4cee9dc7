use clap::{Parser, Subcommand};

mod cli;

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
    Bench(cli::bench::BenchCommand),
    /// Generate text for one or more prompts, batched together.
    Run(cli::run::RunArgs),
    /// Serve an OpenAI-compatible HTTP API (completions, chat, metrics).
    Serve(cli::serve::ServeArgs),
    /// Load-test a running server on this machine (loopback only) with streamed requests.
    Loadtest(cli::loadtest::LoadTestArgs),
    /// Draw logit entropy against varentropy per token from `run --json` output, coloured by
    /// entropix branch, with the quadrant thresholds (.svg or .png).
    PlotMetrics(cli::plot_metrics::PlotMetricsArgs),
    /// Accuracy and speed per decoding strategy on HumanEval, GSM-Symbolic or MMLU
    /// (data from `scripts/fetch-eval-data`).
    Eval(cli::eval::EvalArgs),
    /// Several systems' load-test runs (`loadtest --json` files) in one chart against rate.
    PlotSweep(cli::plot_sweep::PlotSweepArgs),
    /// Perplexity of a text file, computed as llama.cpp's llama-perplexity computes it.
    Perplexity(cli::perplexity::PerplexityArgs),
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
        Command::Run(args) => cli::run::run(args),
        Command::Bench(command) => cli::bench::run_bench(command),
        Command::Serve(args) => cli::serve::run(args),
        Command::Loadtest(args) => cli::loadtest::run(args),
        Command::PlotMetrics(args) => cli::plot_metrics::run(args),
        Command::Eval(args) => cli::eval::run(args),
        Command::Perplexity(args) => cli::perplexity::run(args),
        Command::PlotSweep(args) => cli::plot_sweep::run(args),
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
