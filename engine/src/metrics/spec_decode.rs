//! Speculative decoding's series, named as vLLM's (`vllm:spec_decode_*`) under our prefix.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::speculative::SpeculativeConfig;

pub struct SpecDecodeMetrics {
    /// Verified drafts: one per sequence per step that verified at least one draft token.
    pub num_drafts: AtomicU64,
    pub num_draft_tokens: AtomicU64,
    pub num_accepted_tokens: AtomicU64,
    /// Drafts whose token at position `i` was kept (vLLM's per-position acceptance).
    pub accepted_per_position: [AtomicU64; SpeculativeConfig::MAX_SPECULATIVE_TOKENS],
}

impl Default for SpecDecodeMetrics {
    fn default() -> Self {
        Self {
            num_drafts: AtomicU64::new(0),
            num_draft_tokens: AtomicU64::new(0),
            num_accepted_tokens: AtomicU64::new(0),
            accepted_per_position: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl SpecDecodeMetrics {
    /// One verified draft of `verified` tokens of which the first `accepted` were kept.
    pub fn record(&self, verified: usize, accepted: usize) {
        self.num_drafts.fetch_add(1, Ordering::Relaxed);
        self.num_draft_tokens.fetch_add(verified as u64, Ordering::Relaxed);
        self.num_accepted_tokens.fetch_add(accepted as u64, Ordering::Relaxed);
        for position in self.accepted_per_position.iter().take(accepted) {
            position.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Kept draft tokens over verified ones; `None` before any draft.
    pub fn acceptance_rate(&self) -> Option<f64> {
        let drafted = self.num_draft_tokens.load(Ordering::Relaxed);
        (drafted > 0).then(|| self.num_accepted_tokens.load(Ordering::Relaxed) as f64 / drafted as f64)
    }

    /// Tokens a verifying forward gave its sequence on average: the kept draft tokens and the
    /// one drawn after them. `None` before any draft.
    pub fn tokens_per_forward(&self) -> Option<f64> {
        let drafts = self.num_drafts.load(Ordering::Relaxed);
        (drafts > 0).then(|| 1.0 + self.num_accepted_tokens.load(Ordering::Relaxed) as f64 / drafts as f64)
    }

    pub(super) fn render(&self, out: &mut String) {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let counters: [(&str, &str, &AtomicU64); 3] = [
            ("entrobatch_spec_decode_num_drafts_total", "Drafts verified (sequences x steps).", &self.num_drafts),
            ("entrobatch_spec_decode_num_draft_tokens_total", "Draft tokens verified.", &self.num_draft_tokens),
            ("entrobatch_spec_decode_num_accepted_tokens_total", "Draft tokens kept.", &self.num_accepted_tokens),
        ];
        for (name, help, c) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", g(c));
        }
        let name = "entrobatch_spec_decode_num_accepted_tokens_per_pos";
        let _ = writeln!(out, "# HELP {name} Drafts whose token at this position was kept.\n# TYPE {name} counter");
        let last = self.accepted_per_position.iter().rposition(|c| g(c) > 0).map_or(0, |i| i + 1);
        for (position, c) in self.accepted_per_position.iter().enumerate().take(last.max(1)) {
            let _ = writeln!(out, "{name}{{position=\"{position}\"}} {}", g(c));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_drafts_that_got_that_far() {
        let m = SpecDecodeMetrics::default();
        m.record(4, 2);
        m.record(3, 0);
        m.record(5, 3);
        assert_eq!(m.acceptance_rate(), Some(5.0 / 12.0));
        let mut out = String::new();
        m.render(&mut out);
        assert!(out.contains("entrobatch_spec_decode_num_drafts_total 3"));
        assert!(out.contains("entrobatch_spec_decode_num_accepted_tokens_per_pos{position=\"0\"} 2"));
        assert!(out.contains("entrobatch_spec_decode_num_accepted_tokens_per_pos{position=\"2\"} 1"));
        assert!(!out.contains("position=\"3\""));
    }
}
