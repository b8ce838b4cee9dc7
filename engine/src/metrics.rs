use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// A Prometheus-style cumulative histogram with fixed buckets (seconds).
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

const LATENCY_BUCKETS: &[f64] = &[0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

impl Histogram {
    fn with_bounds(bounds: &'static [f64]) -> Self {
        Self { bounds, inner: Mutex::new(HistogramInner { counts: vec![0; bounds.len()], ..Default::default() }) }
    }

    fn latency() -> Self {
        Self {
            bounds: LATENCY_BUCKETS,
            inner: Mutex::new(HistogramInner { counts: vec![0; LATENCY_BUCKETS.len()], ..Default::default() }),
        }
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

    fn render(&self, name: &str, help: &str, out: &mut String) {
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

/// Counters and gauges the engine loop updates and `/metrics` renders.
pub struct EngineMetrics {
    pub requests_finished: [AtomicU64; 4],
    pub requests_rejected: AtomicU64,
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
    pub wedlm: WedlmMetrics,
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
    pub step_duration: Histogram,
}

impl Default for EngineMetrics {
    fn default() -> Self {
        Self {
            requests_finished: Default::default(),
            requests_rejected: AtomicU64::new(0),
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
            output_tokens: AtomicU64::new(0),
            steps: AtomicU64::new(0),
            step_errors: AtomicU64::new(0),
            mti_tokens: AtomicU64::new(0),
            mti_triggered_tokens: AtomicU64::new(0),
            forward_rows: AtomicU64::new(0),
            wedlm: WedlmMetrics::default(),
            time_to_first_token: Histogram::latency(),
            inter_token_latency: Histogram::latency(),
            step_duration: Histogram::latency(),
        }
    }
}

impl EngineMetrics {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Reserves `count` in-flight slots at once, or none if that would pass `limit`.
    pub fn try_reserve_in_flight(&self, count: u64, limit: u64) -> bool {
        self.in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n + count <= limit).then_some(n + count))
            .is_ok()
    }

    /// Releases a slot: called just before a request's `Finished` event is sent.
    pub fn release_in_flight(&self) {
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
        let scalars: [(&str, &str, &str, &AtomicU64); 12] = [
            ("entrobatch_num_requests_in_flight", "gauge", "Requests submitted and not yet finished.", &self.in_flight),
            ("entrobatch_num_requests_running", "gauge", "Sequences in the running set.", &self.running),
            ("entrobatch_num_requests_waiting", "gauge", "Sequences waiting for admission.", &self.waiting),
            ("entrobatch_kv_blocks_used", "gauge", "KV cache blocks in use.", &self.kv_blocks_used),
            ("entrobatch_kv_blocks_total", "gauge", "KV cache blocks in the pool.", &self.kv_blocks_total),
            ("entrobatch_preemptions_total", "counter", "Sequences preempted by recompute.", &self.preemptions),
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
        let name = "entrobatch_structured_output_masks_total";
        let _ = writeln!(out, "# HELP {name} Structured-output token masks computed (finished requests).");
        let _ = writeln!(out, "# TYPE {name} counter\n{name} {}", g(&self.grammar_masks));
        let name = "entrobatch_structured_output_mask_seconds_total";
        let seconds = self.grammar_mask_nanos.load(Ordering::Relaxed) as f64 * 1e-9;
        let _ = writeln!(out, "# HELP {name} Time spent computing structured-output masks.");
        let _ = writeln!(out, "# TYPE {name} counter\n{name} {seconds}");
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
        self.step_duration.render("entrobatch_step_duration_seconds", "Duration of one engine step.", &mut out);
        out
    }
}

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

    fn render(&self, forward_rows: &AtomicU64, out: &mut String) {
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
