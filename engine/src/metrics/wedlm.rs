//! WeDLM's parallel-decoding series.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use super::histogram::Histogram;

/// Per-request tokens-per-forward buckets: 1 is autoregressive pace, W the most a window gives.
const TOKENS_PER_FORWARD_BUCKETS: &[f64] = &[1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0];

/// WeDLM parallel decoding. `tokens / forwards` is the reference engine's
/// `tokens_per_forward` (committed tokens over the sum, across steps, of active WeDLM sequences).
pub struct WedlmMetrics {
    /// Window forwards: one per WeDLM sequence per forward that ran its window.
    pub forwards: AtomicU64,
    /// Tokens those forwards committed.
    pub tokens: AtomicU64,
    /// Window (scratch) rows those forwards ran.
    pub window_rows: AtomicU64,
    /// Each finished WeDLM request's own tokens per forward.
    pub request_tokens_per_forward: Histogram,
}

impl Default for WedlmMetrics {
    fn default() -> Self {
        Self {
            forwards: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            window_rows: AtomicU64::new(0),
            request_tokens_per_forward: Histogram::with_bounds(TOKENS_PER_FORWARD_BUCKETS),
        }
    }
}

impl WedlmMetrics {
    /// Committed tokens per window forward over all WeDLM requests so far; None before any.
    pub fn tokens_per_forward(&self) -> Option<f64> {
        let forwards = self.forwards.load(Ordering::Relaxed);
        (forwards > 0).then(|| self.tokens.load(Ordering::Relaxed) as f64 / forwards as f64)
    }

    pub(super) fn render(&self, forward_rows: &AtomicU64, out: &mut String) {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let counters: [(&str, &str, &AtomicU64); 4] = [
            ("entrobatch_forward_rows_total", "Rows run by all forwards, scratch rows included.", forward_rows),
            ("entrobatch_wedlm_forwards_total", "WeDLM window forwards (sequences x steps).", &self.forwards),
            ("entrobatch_wedlm_committed_tokens_total", "Tokens committed by WeDLM windows.", &self.tokens),
            ("entrobatch_wedlm_window_rows_total", "Window rows run by WeDLM sequences.", &self.window_rows),
        ];
        for (name, help, c) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", g(c));
        }
        self.request_tokens_per_forward.render(
            "entrobatch_wedlm_request_tokens_per_forward",
            "Committed tokens per window forward of each finished WeDLM request.",
            out,
        );
    }
}
