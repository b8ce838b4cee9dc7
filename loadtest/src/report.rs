//! The human-readable report, laid out like `vllm bench serve`'s.

use std::io::Write;

use super::stats::Distribution;
use super::LoadTestReport;

pub fn print_report(report: &LoadTestReport, out: &mut impl Write) -> std::io::Result<()> {
    let s = &report.summary;
    let mode = match (report.rate, report.concurrency) {
        (Some(r), Some(c)) => format!("Poisson {r} req/s, at most {c} in flight"),
        (Some(r), None) => format!("Poisson {r} req/s"),
        (None, Some(c)) => format!("concurrency {c}"),
        (None, None) => "all at once".into(),
    };
    writeln!(out, "============ Serving Benchmark Result ============")?;
    row(out, "Target", &report.url)?;
    row(out, "Traffic", &mode)?;
    if report.turns > 1 {
        row(out, "Chat turns per conversation", report.turns)?;
    }
    row(out, "Requests", s.requests)?;
    row(out, "Successful requests", s.completed)?;
    row(out, "Failed requests", s.errors)?;
    row(out, "Not sent (time limit)", s.not_sent)?;
    row(out, "Benchmark duration (s)", format!("{:.2}", s.duration_s))?;
    row(out, "Total input tokens", s.total_input_tokens)?;
    row(out, "Input tokens from prefix cache", s.total_cached_tokens)?;
    row(out, "Total generated tokens", s.total_output_tokens)?;
    row(out, "Request throughput (req/s)", format!("{:.2}", s.request_throughput))?;
    row(out, "Output token throughput (tok/s)", format!("{:.2}", s.output_throughput))?;
    row(out, "Total token throughput (tok/s)", format!("{:.2}", s.total_token_throughput))?;
    if let Some(g) = s.goodput {
        row(out, "Request goodput (req/s)", format!("{g:.2}"))?;
    }
    section(out, "Time to First Token", "TTFT", &s.ttft_ms)?;
    section(out, "Time per Output Token (excl. 1st token)", "TPOT", &s.tpot_ms)?;
    section(out, "Inter-token Latency", "ITL", &s.itl_ms)?;
    section(out, "End-to-end Latency", "E2EL", &s.e2el_ms)?;
    if !s.error_reasons.is_empty() {
        writeln!(out, "{:-^50}", "Errors")?;
        for (reason, count) in &s.error_reasons {
            writeln!(out, "{count:>6}  {reason}")?;
        }
    }
    writeln!(out, "==================================================")?;
    writeln!(out, "lost: {}", s.lost)
}

fn row(out: &mut impl Write, name: &str, value: impl std::fmt::Display) -> std::io::Result<()> {
    writeln!(out, "{:<40}{:>10}", format!("{name}:"), value)
}

fn section(out: &mut impl Write, title: &str, short: &str, d: &Distribution) -> std::io::Result<()> {
    writeln!(out, "{:-^50}", title)?;
    row(out, &format!("Mean {short} (ms)"), format!("{:.2}", d.mean))?;
    row(out, &format!("Median {short} (ms)"), format!("{:.2}", d.p50))?;
    row(out, &format!("P90 {short} (ms)"), format!("{:.2}", d.p90))?;
    row(out, &format!("P99 {short} (ms)"), format!("{:.2}", d.p99))
}
