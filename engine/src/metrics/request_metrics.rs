//! A request's lifecycle (submitted, first scheduled, first and last token) and, when it ends,
//! vLLM's per-request histograms with vLLM's definitions (`FinishedRequestStats`): queue =
//! scheduled - submitted, prefill = first token - scheduled, decode = last token - first token,
//! inference = last token - scheduled, e2e = finished - submitted, time per output token =
//! decode / (generated - 1).

use std::time::{Duration, Instant};

use super::histogram::{Histogram, REQUEST_BUCKETS, TOKEN_COUNT_BUCKETS, TOKEN_GAP_BUCKETS};

#[derive(Clone, Copy, Debug)]
pub struct RequestTimes {
    submitted_at: Instant,
    scheduled_at: Option<Instant>,
    first_token_at: Option<Instant>,
    last_token_at: Option<Instant>,
    /// Admission's estimate of the TTFT, when a TTFT target made it estimate.
    estimated_ttft: Option<Duration>,
}

/// Latencies of one appended token, for the TTFT and inter-token histograms.
pub struct TokenTiming {
    pub time_to_first_token: Option<f64>,
    pub inter_token_latency: Option<f64>,
}

impl RequestTimes {
    pub fn new(submitted_at: Instant) -> Self {
        Self { submitted_at, scheduled_at: None, first_token_at: None, last_token_at: None, estimated_ttft: None }
    }

    pub fn with_estimated_ttft(self, estimated_ttft: Option<Duration>) -> Self {
        Self { estimated_ttft, ..self }
    }

    /// Admission's estimated TTFT beside the one the request had, once it had a first token.
    pub fn ttft_against_estimate(&self) -> Option<(Duration, Duration)> {
        let first_token = self.first_token_at?;
        Some((self.estimated_ttft?, first_token.saturating_duration_since(self.submitted_at)))
    }

    /// The first step that runs the request ends its queueing; a preemption does not restart it.
    pub fn on_scheduled(&mut self, now: Instant) {
        self.scheduled_at.get_or_insert(now);
    }

    pub fn on_token(&mut self, now: Instant) -> TokenTiming {
        let timing = TokenTiming {
            time_to_first_token: self.last_token_at.is_none().then(|| secs(self.submitted_at, now)),
            inter_token_latency: self.last_token_at.map(|t| secs(t, now)),
        };
        self.first_token_at.get_or_insert(now);
        self.last_token_at = Some(now);
        timing
    }
}

fn secs(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64()
}

pub struct RequestMetrics {
    pub e2e_latency: Histogram,
    pub queue_time: Histogram,
    /// Admission's estimate of the time to first token, for the requests it estimated; beside
    /// `entrobatch_time_to_first_token_seconds` it says whether a TTFT target refuses too much
    /// or too little.
    pub ttft_estimated: Histogram,
    pub prefill_time: Histogram,
    pub decode_time: Histogram,
    pub inference_time: Histogram,
    pub time_per_output_token: Histogram,
    pub prompt_tokens: Histogram,
    pub generation_tokens: Histogram,
}

impl Default for RequestMetrics {
    fn default() -> Self {
        let request = || Histogram::with_bounds(REQUEST_BUCKETS);
        Self {
            e2e_latency: request(),
            queue_time: request(),
            ttft_estimated: request(),
            prefill_time: request(),
            decode_time: request(),
            inference_time: request(),
            time_per_output_token: Histogram::with_bounds(TOKEN_GAP_BUCKETS),
            prompt_tokens: Histogram::with_bounds(TOKEN_COUNT_BUCKETS),
            generation_tokens: Histogram::with_bounds(TOKEN_COUNT_BUCKETS),
        }
    }
}

impl RequestMetrics {
    /// Observes a request that ended at `now`; phases it never reached are left out.
    pub fn observe_finished(&self, times: &RequestTimes, now: Instant, prompt_tokens: usize, generated: usize) {
        self.e2e_latency.observe(secs(times.submitted_at, now));
        self.prompt_tokens.observe(prompt_tokens as f64);
        self.generation_tokens.observe(generated as f64);
        let Some(scheduled) = times.scheduled_at else { return };
        self.queue_time.observe(secs(times.submitted_at, scheduled));
        if let Some(estimate) = times.estimated_ttft {
            self.ttft_estimated.observe(estimate.as_secs_f64());
        }
        let (Some(first), Some(last)) = (times.first_token_at, times.last_token_at) else { return };
        self.prefill_time.observe(secs(scheduled, first));
        self.inference_time.observe(secs(scheduled, last));
        let decode = secs(first, last);
        self.decode_time.observe(decode);
        if generated > 1 {
            self.time_per_output_token.observe(decode / (generated - 1) as f64);
        }
    }

    pub fn render(&self, out: &mut String) {
        let series: [(&str, &str, &Histogram); 9] = [
            ("e2e_request_latency_seconds", "Time from submit to the request's end.", &self.e2e_latency),
            ("request_queue_time_seconds", "Time from submit to the first step that ran it.", &self.queue_time),
            (
                "request_time_to_first_token_estimated_seconds",
                "Admission's estimate of the time to first token, for requests admitted under a TTFT target.",
                &self.ttft_estimated,
            ),
            ("request_prefill_time_seconds", "Time from the first step to the first token.", &self.prefill_time),
            ("request_decode_time_seconds", "Time from the first token to the last.", &self.decode_time),
            ("request_inference_time_seconds", "Time from the first step to the last token.", &self.inference_time),
            (
                "request_time_per_output_token_seconds",
                "Per request: decode time over generated tokens minus one.",
                &self.time_per_output_token,
            ),
            ("request_prompt_tokens", "Prompt tokens of each finished request.", &self.prompt_tokens),
            ("request_generation_tokens", "Generated tokens of each finished request.", &self.generation_tokens),
        ];
        for (name, help, histogram) in series {
            histogram.render(&format!("entrobatch_{name}"), help, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn phases_follow_vllm_definitions() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut times = RequestTimes::new(t0);
        times.on_scheduled(at(200));
        times.on_scheduled(at(900)); // a preemption's rescheduling does not move it
        assert_eq!(times.on_token(at(500)).time_to_first_token, Some(0.5));
        assert_eq!(times.on_token(at(600)).inter_token_latency.map(|s| (s * 1e3).round()), Some(100.0));
        times.on_token(at(1100));
        let m = RequestMetrics::default();
        m.observe_finished(&times, at(1300), 7, 3);
        let close = |h: &Histogram, want: f64| (h.sum() - want).abs() < 1e-9 && h.count() == 1;
        assert!(close(&m.e2e_latency, 1.3));
        assert!(close(&m.queue_time, 0.2));
        assert!(close(&m.prefill_time, 0.3));
        assert!(close(&m.decode_time, 0.6));
        assert!(close(&m.inference_time, 0.9));
        assert!(close(&m.time_per_output_token, 0.3)); // 0.6 s over 2 gaps
        assert!(close(&m.prompt_tokens, 7.0) && close(&m.generation_tokens, 3.0));
        // Aborted while waiting: only the request-level series.
        let m = RequestMetrics::default();
        m.observe_finished(&RequestTimes::new(t0), at(50), 4, 0);
        assert_eq!((m.e2e_latency.count(), m.queue_time.count(), m.prefill_time.count()), (1, 0, 0));
        assert_eq!(m.ttft_estimated.count(), 0);
    }

    #[test]
    fn admissions_estimate_sits_beside_the_ttft_it_estimated() {
        let t0 = Instant::now();
        let mut times = RequestTimes::new(t0).with_estimated_ttft(Some(Duration::from_millis(250)));
        times.on_scheduled(t0 + Duration::from_millis(300));
        assert_eq!(times.ttft_against_estimate(), None, "no first token yet");
        times.on_token(t0 + Duration::from_millis(400));
        times.on_token(t0 + Duration::from_millis(450));
        assert_eq!(times.ttft_against_estimate(), Some((Duration::from_millis(250), Duration::from_millis(400))));
        let m = RequestMetrics::default();
        m.observe_finished(&times, t0 + Duration::from_secs(1), 3, 0);
        assert_eq!((m.ttft_estimated.count(), m.ttft_estimated.sum()), (1, 0.25));
        // No TTFT target, no estimate: the series stays empty.
        let m = RequestMetrics::default();
        let mut plain = RequestTimes::new(t0);
        plain.on_scheduled(t0);
        m.observe_finished(&plain, t0 + Duration::from_secs(1), 3, 0);
        assert_eq!((m.queue_time.count(), m.ttft_estimated.count()), (1, 0));
    }
}
