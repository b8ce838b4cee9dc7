//! The human-readable report, laid out like `vllm bench serve`'s.

use std::collections::BTreeMap;
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
        for group in group_reasons(&s.error_reasons) {
            writeln!(out, "{:>6}  {}", group.count, group.example)?;
            if group.variants > 1 {
                writeln!(out, "        ({} messages like this one, differing only in their numbers)", group.variants)?;
            }
        }
    }
    writeln!(out, "==================================================")?;
    writeln!(out, "lost: {}", s.lost)
}

/// Error messages that differ only in their numbers (an admission refusal states its own
/// estimate and wait), counted together: one line per kind of failure, most frequent first.
struct ReasonGroup<'a> {
    count: usize,
    variants: usize,
    /// The most frequent message of the group.
    example: &'a str,
}

fn group_reasons(reasons: &BTreeMap<String, usize>) -> Vec<ReasonGroup<'_>> {
    let mut groups: BTreeMap<String, ReasonGroup<'_>> = BTreeMap::new();
    for (reason, &count) in reasons {
        let group = groups.entry(shape(reason)).or_insert(ReasonGroup { count: 0, variants: 0, example: reason });
        if count > reasons[group.example] {
            group.example = reason;
        }
        group.count += count;
        group.variants += 1;
    }
    let mut groups: Vec<ReasonGroup<'_>> = groups.into_values().collect();
    groups.sort_by(|a, b| b.count.cmp(&a.count).then(a.example.cmp(b.example)));
    groups
}

/// What a reason says with its numbers left out, its status (`HTTP 429: `) kept.
fn shape(reason: &str) -> String {
    match reason.split_once(": ") {
        Some((status, message)) => format!("{status}: {}", without_numbers(message)),
        None => without_numbers(reason),
    }
}

/// `reason` with every run of digits (and decimal points between them) replaced by `#`.
fn without_numbers(reason: &str) -> String {
    let mut out = String::with_capacity(reason.len());
    let mut chars = reason.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            while chars.next_if(|d| d.is_ascii_digit() || *d == '.').is_some() {}
            out.push('#');
        } else {
            out.push(c);
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_that_differ_only_in_their_numbers_are_one_line() {
        let reasons: BTreeMap<String, usize> = [
            ("HTTP 429: the first token would come about 1601 ms after the request; retry in 1 s", 1),
            ("HTTP 429: the first token would come about 1710 ms after the request; retry in 1 s", 3),
            ("HTTP 429: the first token would come about 1802.5 ms after the request; retry in 2 s", 1),
            ("HTTP 400: max_tokens must be at least 1", 2),
            ("stream error: the engine stopped", 1),
        ]
        .into_iter()
        .map(|(r, n)| (r.to_string(), n))
        .collect();
        let groups = group_reasons(&reasons);
        let lines: Vec<(usize, usize, &str)> = groups.iter().map(|g| (g.count, g.variants, g.example)).collect();
        assert_eq!(
            lines,
            vec![
                (5, 3, "HTTP 429: the first token would come about 1710 ms after the request; retry in 1 s"),
                (2, 1, "HTTP 400: max_tokens must be at least 1"),
                (1, 1, "stream error: the engine stopped"),
            ]
        );
    }

    #[test]
    fn different_messages_or_statuses_stay_apart() {
        let reasons: BTreeMap<String, usize> = [("HTTP 400: bad a", 1), ("HTTP 400: bad b", 1), ("HTTP 503: bad a", 1)]
            .into_iter()
            .map(|(r, n)| (r.to_string(), n))
            .collect();
        assert_eq!(group_reasons(&reasons).len(), 3);
    }
}
