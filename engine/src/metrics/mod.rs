//! The engine's series on `/metrics`: vLLM's set under the `entrobatch_` prefix with vLLM's
//! meanings and units (so a vLLM dashboard works after a rename), and the strategies' own.

mod histogram;
mod request_metrics;
mod spec_decode;
mod wedlm;

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

pub use histogram::Histogram;
use histogram::{STEP_BUCKETS, TOKEN_GAP_BUCKETS, TTFT_BUCKETS};
pub use request_metrics::{RequestMetrics, RequestTimes, TokenTiming};
pub use spec_decode::SpecDecodeMetrics;
pub use wedlm::WedlmMetrics;

/// Counters and gauges the engine loop updates and `/metrics` renders.
pub struct EngineMetrics {
    pub requests_finished: [AtomicU64; 4],
    pub requests_rejected: AtomicU64,
    /// Of `requests_rejected`, those refused at submission: the in-flight bound was reached,
    /// or they would have waited past their TTFT target.
    pub requests_refused_queue_full: AtomicU64,
    pub requests_refused_ttft: AtomicU64,
    /// Requests submitted whose `Finished` event has not been emitted yet; `submit` reserves
    /// a slot here before queueing, so the queue bound holds exactly, between steps too.
    pub in_flight: AtomicU64,
    pub running: AtomicU64,
    pub waiting: AtomicU64,
    pub kv_blocks_used: AtomicU64,
    pub kv_blocks_total: AtomicU64,
    pub preemptions: AtomicU64,
    pub prefix_cache_queries: AtomicU64,
    pub prefix_cache_hits: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub output_tokens: AtomicU64,
    pub steps: AtomicU64,
    pub step_errors: AtomicU64,
    /// Tokens decoded with MTI guidance active, and those of them it guided (the trigger rate
    /// is their ratio, the paper's "CFG usage").
    pub mti_tokens: AtomicU64,
    pub mti_triggered_tokens: AtomicU64,
    /// Rows run by all forwards (token rows plus every strategy's scratch rows).
    pub forward_rows: AtomicU64,
    /// Structured-output masks computed by finished requests, and the time they took.
    pub grammar_masks: AtomicU64,
    pub grammar_mask_nanos: AtomicU64,
    /// JSON schema outputs checked after decoding (their grammar could not enforce the whole
    /// schema), and those of them the check found invalid.
    pub schema_checks: AtomicU64,
    pub schema_checks_failed: AtomicU64,
    pub wedlm: WedlmMetrics,
    pub spec_decode: SpecDecodeMetrics,
    pub requests: RequestMetrics,
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
    pub step_duration: Histogram,
}

impl Default for EngineMetrics {
    fn default() -> Self {
        Self {
            requests_finished: Default::default(),
            requests_rejected: AtomicU64::new(0),
            requests_refused_queue_full: AtomicU64::new(0),
            requests_refused_ttft: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            running: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            kv_blocks_used: AtomicU64::new(0),
            kv_blocks_total: AtomicU64::new(0),
            preemptions: AtomicU64::new(0),
            prefix_cache_queries: AtomicU64::new(0),
            prefix_cache_hits: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            grammar_masks: AtomicU64::new(0),
            grammar_mask_nanos: AtomicU64::new(0),
            schema_checks: AtomicU64::new(0),
            schema_checks_failed: AtomicU64::new(0),
            output_tokens: AtomicU64::new(0),
            steps: AtomicU64::new(0),
            step_errors: AtomicU64::new(0),
            mti_tokens: AtomicU64::new(0),
            mti_triggered_tokens: AtomicU64::new(0),
            forward_rows: AtomicU64::new(0),
            wedlm: WedlmMetrics::default(),
            spec_decode: SpecDecodeMetrics::default(),
            requests: RequestMetrics::default(),
            time_to_first_token: Histogram::with_bounds(TTFT_BUCKETS),
            inter_token_latency: Histogram::with_bounds(TOKEN_GAP_BUCKETS),
            step_duration: Histogram::with_bounds(STEP_BUCKETS),
        }
    }
}

impl EngineMetrics {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Reserves `count` in-flight slots at once, or none if that would pass `limit`. The
    /// engine goes through `InFlightPermit`, which frees each slot when dropped.
    pub(crate) fn try_reserve_in_flight(&self, count: u64, limit: u64) -> bool {
        self.in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n + count <= limit).then_some(n + count))
            .is_ok()
    }

    /// Releases a slot: `InFlightPermit`'s drop, just before a request's `Finished` event is sent.
    pub(crate) fn release_in_flight(&self) {
        let _ = self.in_flight.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }

    /// Counts one emitted token by its `TokenMetrics::guided` flag (None: not an MTI token).
    pub fn record_guidance(&self, guided: Option<bool>) {
        if let Some(triggered) = guided {
            self.mti_tokens.fetch_add(1, Ordering::Relaxed);
            self.mti_triggered_tokens.fetch_add(u64::from(triggered), Ordering::Relaxed);
        }
    }

    /// Adds a finished request's structured-output mask count and time.
    pub fn record_grammar_masks(&self, (time, count): (std::time::Duration, u64)) {
        self.grammar_masks.fetch_add(count, Ordering::Relaxed);
        let nanos = u64::try_from(time.as_nanos()).unwrap_or(u64::MAX);
        self.grammar_mask_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Mean time to compute one structured-output mask, in seconds; None before any.
    pub fn record_schema_check(&self, valid: bool) {
        self.schema_checks.fetch_add(1, Ordering::Relaxed);
        if !valid {
            self.schema_checks_failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn mean_grammar_mask_seconds(&self) -> Option<f64> {
        let count = self.grammar_masks.load(Ordering::Relaxed);
        (count > 0).then(|| self.grammar_mask_nanos.load(Ordering::Relaxed) as f64 * 1e-9 / count as f64)
    }

    /// Guided share of MTI tokens so far; None before any.
    pub fn mti_trigger_rate(&self) -> Option<f64> {
        let tokens = self.mti_tokens.load(Ordering::Relaxed);
        (tokens > 0).then(|| self.mti_triggered_tokens.load(Ordering::Relaxed) as f64 / tokens as f64)
    }

    /// Prometheus text exposition format.
    pub fn render_prometheus(&self) -> String {
        let mut out = String::new();
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let _ = writeln!(out, "# HELP entrobatch_requests_total Finished requests by outcome.");
        let _ = writeln!(out, "# TYPE entrobatch_requests_total counter");
        for (reason, c) in crate::FinishReason::ALL.iter().zip(&self.requests_finished) {
            let _ = writeln!(out, "entrobatch_requests_total{{outcome=\"{}\"}} {}", reason.as_str(), g(c));
        }
        let _ = writeln!(out, "entrobatch_requests_total{{outcome=\"rejected\"}} {}", g(&self.requests_rejected));
        let name = "entrobatch_requests_refused_total";
        let _ = writeln!(out, "# HELP {name} Requests refused at submission, by why.\n# TYPE {name} counter");
        let _ = writeln!(out, "{name}{{reason=\"ttft_target\"}} {}", g(&self.requests_refused_ttft));
        let _ = writeln!(out, "{name}{{reason=\"queue_full\"}} {}", g(&self.requests_refused_queue_full));
        // vLLM's name for the same counts (every finished request, by why it finished).
        let name = "entrobatch_request_success_total";
        let _ = writeln!(out, "# HELP {name} Finished requests by finish reason.\n# TYPE {name} counter");
        for (reason, c) in crate::FinishReason::ALL.iter().zip(&self.requests_finished) {
            let _ = writeln!(out, "{name}{{finished_reason=\"{}\"}} {}", reason.as_str(), g(c));
        }
        let scalars: [(&str, &str, &str, &AtomicU64); 12] = [
            ("entrobatch_num_requests_in_flight", "gauge", "Requests submitted and not yet finished.", &self.in_flight),
            ("entrobatch_num_requests_running", "gauge", "Sequences in the running set.", &self.running),
            ("entrobatch_num_requests_waiting", "gauge", "Sequences waiting for admission.", &self.waiting),
            ("entrobatch_kv_blocks_used", "gauge", "KV cache blocks in use.", &self.kv_blocks_used),
            ("entrobatch_kv_blocks_total", "gauge", "KV cache blocks in the pool.", &self.kv_blocks_total),
            ("entrobatch_num_preemptions_total", "counter", "Sequences preempted by recompute.", &self.preemptions),
            (
                "entrobatch_prefix_cache_queries_total",
                "counter",
                "Prompt tokens looked up in the prefix cache.",
                &self.prefix_cache_queries,
            ),
            (
                "entrobatch_prefix_cache_hits_total",
                "counter",
                "Prompt tokens served from the prefix cache.",
                &self.prefix_cache_hits,
            ),
            ("entrobatch_prompt_tokens_total", "counter", "Prompt tokens admitted.", &self.prompt_tokens),
            ("entrobatch_generation_tokens_total", "counter", "Output tokens generated.", &self.output_tokens),
            ("entrobatch_steps_total", "counter", "Engine steps (forward passes).", &self.steps),
            ("entrobatch_step_errors_total", "counter", "Steps whose forward failed.", &self.step_errors),
        ];
        for (name, kind, help, c) in scalars {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}", g(c));
        }
        let (used, total) = (g(&self.kv_blocks_used), g(&self.kv_blocks_total));
        let usage = if total > 0 { used as f64 / total as f64 } else { 0.0 };
        let name = "entrobatch_kv_cache_usage_perc";
        let _ = writeln!(out, "# HELP {name} KV cache usage: 1 means every block is in use.");
        let _ = writeln!(out, "# TYPE {name} gauge\n{name} {usage}");
        let name = "entrobatch_structured_output_masks_total";
        let _ = writeln!(out, "# HELP {name} Structured-output token masks computed (finished requests).");
        let _ = writeln!(out, "# TYPE {name} counter\n{name} {}", g(&self.grammar_masks));
        let name = "entrobatch_structured_output_mask_seconds_total";
        let seconds = self.grammar_mask_nanos.load(Ordering::Relaxed) as f64 * 1e-9;
        let _ = writeln!(out, "# HELP {name} Time spent computing structured-output masks.");
        let _ = writeln!(out, "# TYPE {name} counter\n{name} {seconds}");
        let checks: [(&str, &str, &AtomicU64); 2] = [
            (
                "entrobatch_structured_output_schema_checks_total",
                "JSON schema outputs checked after decoding because their grammar could not enforce the whole schema.",
                &self.schema_checks,
            ),
            (
                "entrobatch_structured_output_schema_check_failures_total",
                "Checked JSON schema outputs that did not satisfy the schema.",
                &self.schema_checks_failed,
            ),
        ];
        for (name, help, c) in checks {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", g(c));
        }
        let mti: [(&str, &str, &AtomicU64); 2] = [
            ("entrobatch_mti_tokens_total", "Tokens decoded with MTI guidance active.", &self.mti_tokens),
            (
                "entrobatch_mti_triggered_tokens_total",
                "MTI tokens whose entropy triggered guidance.",
                &self.mti_triggered_tokens,
            ),
        ];
        for (name, help, c) in mti {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", g(c));
        }
        // The paper's "CFG usage", ready to graph without a PromQL division.
        if let Some(rate) = self.mti_trigger_rate() {
            let name = "entrobatch_mti_trigger_rate";
            let _ = writeln!(
                out,
                "# HELP {name} Share of MTI tokens that triggered guidance.\n# TYPE {name} gauge\n{name} {rate}"
            );
        }
        self.wedlm.render(&self.forward_rows, &mut out);
        self.spec_decode.render(&mut out);
        self.time_to_first_token.render(
            "entrobatch_time_to_first_token_seconds",
            "Time from submit to the first token.",
            &mut out,
        );
        self.inter_token_latency.render(
            "entrobatch_inter_token_latency_seconds",
            "Time between consecutive tokens of a request.",
            &mut out,
        );
        // vLLM's older name for the same per-token gaps, which its dashboards still query.
        self.inter_token_latency.render(
            "entrobatch_time_per_output_token_seconds",
            "Time between consecutive tokens of a request (same observations as inter_token_latency).",
            &mut out,
        );
        self.requests.render(&mut out);
        self.step_duration.render("entrobatch_step_duration_seconds", "Duration of one engine step.", &mut out);
        out
    }
}
