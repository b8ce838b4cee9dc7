//! A Prometheus cumulative histogram with fixed buckets, and the bucket sets vLLM uses, so a
//! dashboard's `histogram_quantile` reads ours as it reads vLLM's.

use std::fmt::Write;

use parking_lot::Mutex;

/// Short latencies: steps, and the engine's own token gaps.
pub const STEP_BUCKETS: &[f64] = &[0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
/// vLLM's `time_to_first_token_seconds` buckets.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
];
/// vLLM's inter-token and time-per-output-token buckets.
pub const TOKEN_GAP_BUCKETS: &[f64] =
    &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
/// vLLM's request-phase buckets (e2e, queue, prefill, decode, inference).
pub const REQUEST_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
];
/// vLLM's 1-2-5 token-count buckets (`build_1_2_5_buckets`), up to a 128k context.
pub const TOKEN_COUNT_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0, 50000.0, 100000.0,
];

pub struct Histogram {
    bounds: &'static [f64],
    inner: Mutex<HistogramInner>,
}

#[derive(Default, Clone)]
struct HistogramInner {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn with_bounds(bounds: &'static [f64]) -> Self {
        Self { bounds, inner: Mutex::new(HistogramInner { counts: vec![0; bounds.len()], ..Default::default() }) }
    }

    pub fn observe(&self, value: f64) {
        let mut inner = self.inner.lock();
        if let Some(i) = self.bounds.iter().position(|&b| value <= b) {
            inner.counts[i] += 1;
        }
        inner.sum += value;
        inner.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.inner.lock().count
    }

    pub fn sum(&self) -> f64 {
        self.inner.lock().sum
    }

    pub fn render(&self, name: &str, help: &str, out: &mut String) {
        let inner = self.inner.lock().clone();
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, count) in self.bounds.iter().zip(&inner.counts) {
            cumulative += count;
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", inner.count);
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", inner.sum, inner.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_the_overflow_only_in_inf() {
        let h = Histogram::with_bounds(&[1.0, 2.0]);
        for v in [0.5, 1.0, 1.5, 7.0] {
            h.observe(v);
        }
        let mut out = String::new();
        h.render("x", "help", &mut out);
        assert!(out.contains("x_bucket{le=\"1\"} 2\nx_bucket{le=\"2\"} 3\nx_bucket{le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("x_sum 10\nx_count 4"), "{out}");
        for bounds in [STEP_BUCKETS, TTFT_BUCKETS, TOKEN_GAP_BUCKETS, REQUEST_BUCKETS, TOKEN_COUNT_BUCKETS] {
            assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
