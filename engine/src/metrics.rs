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

const LATENCY_BUCKETS: &[f64] =
    &[0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

impl Histogram {
    fn latency() -> Self {
        Self {
            bounds: LATENCY_BUCKETS,
            inner: Mutex::new(HistogramInner {
                counts: vec![0; LATENCY_BUCKETS.len()],
                ..Default::default()
            }),
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
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
    pub step_duration: Histogram,
}

pub const FINISH_LABELS: [&str; 4] = ["stop", "length", "abort", "error"];

impl Default for EngineMetrics {
    fn default() -> Self {
        Self {
            requests_finished: Default::default(),
            requests_rejected: AtomicU64::new(0),
            running: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            kv_blocks_used: AtomicU64::new(0),
            kv_blocks_total: AtomicU64::new(0),
            preemptions: AtomicU64::new(0),
            prefix_cache_queries: AtomicU64::new(0),
            prefix_cache_hits: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            output_tokens: AtomicU64::new(0),
            steps: AtomicU64::new(0),
            step_errors: AtomicU64::new(0),
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

    /// Prometheus text exposition format.
    pub fn render_prometheus(&self) -> String {
        let mut out = String::new();
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let _ = writeln!(out, "# HELP entrobatch_requests_total Finished requests by outcome.");
        let _ = writeln!(out, "# TYPE entrobatch_requests_total counter");
        for (label, c) in FINISH_LABELS.iter().zip(&self.requests_finished) {
            let _ = writeln!(out, "entrobatch_requests_total{{outcome=\"{label}\"}} {}", g(c));
        }
        let _ = writeln!(
            out,
            "entrobatch_requests_total{{outcome=\"rejected\"}} {}",
            g(&self.requests_rejected)
        );
        let scalars: [(&str, &str, &str, &AtomicU64); 11] = [
            ("entrobatch_num_requests_running", "gauge", "Sequences in the running set.", &self.running),
            ("entrobatch_num_requests_waiting", "gauge", "Sequences waiting for admission.", &self.waiting),
            ("entrobatch_kv_blocks_used", "gauge", "KV cache blocks in use.", &self.kv_blocks_used),
            ("entrobatch_kv_blocks_total", "gauge", "KV cache blocks in the pool.", &self.kv_blocks_total),
            ("entrobatch_preemptions_total", "counter", "Sequences preempted by recompute.", &self.preemptions),
            ("entrobatch_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", &self.prefix_cache_queries),
            ("entrobatch_prefix_cache_hits_total", "counter", "Prompt tokens served from the prefix cache.", &self.prefix_cache_hits),
            ("entrobatch_prompt_tokens_total", "counter", "Prompt tokens admitted.", &self.prompt_tokens),
            ("entrobatch_generation_tokens_total", "counter", "Output tokens generated.", &self.output_tokens),
            ("entrobatch_steps_total", "counter", "Engine steps (forward passes).", &self.steps),
            ("entrobatch_step_errors_total", "counter", "Steps whose forward failed.", &self.step_errors),
        ];
        for (name, kind, help, c) in scalars {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}", g(c));
        }
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
        self.step_duration.render(
            "entrobatch_step_duration_seconds",
            "Duration of one engine step.",
            &mut out,
        );
        out
    }
}
