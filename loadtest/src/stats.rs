//! vLLM's serving metrics (`vllm/benchmarks/serve.py`, `calculate_metrics`): TTFT, TPOT per
//! request = (E2E - TTFT) / (n - 1) over requests with more than one token, ITL pooled over
//! every gap, E2EL; throughputs over the run's duration; goodput under latency targets.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::client::RequestOutcome;

/// Latency targets in milliseconds (`--goodput ttft:MS tpot:MS e2el:MS`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2el_ms: Option<f64>,
}

impl Slo {
    pub fn parse(items: &[String]) -> Result<Self, String> {
        let mut slo = Slo::default();
        for item in items {
            let (key, value) = item.split_once(':').ok_or_else(|| format!("expected NAME:MS, got {item:?}"))?;
            let ms: f64 = value.parse().map_err(|_| format!("bad milliseconds in {item:?}"))?;
            if !(ms.is_finite() && ms > 0.0) {
                return Err(format!("the target in {item:?} must be positive"));
            }
            match key {
                "ttft" => slo.ttft_ms = Some(ms),
                "tpot" => slo.tpot_ms = Some(ms),
                "e2el" => slo.e2el_ms = Some(ms),
                _ => return Err(format!("unknown goodput metric {key:?} (ttft, tpot, e2el)")),
            }
        }
        Ok(slo)
    }

    pub fn is_set(&self) -> bool {
        self.ttft_ms.is_some() || self.tpot_ms.is_some() || self.e2el_ms.is_some()
    }

    fn met_by(&self, r: &RequestOutcome) -> bool {
        let ok = |target: Option<f64>, seconds: f64| target.is_none_or(|ms| seconds * 1000.0 <= ms);
        ok(self.ttft_ms, r.ttft.unwrap_or(f64::INFINITY))
            && ok(self.tpot_ms, tpot(r).unwrap_or(0.0))
            && ok(self.e2el_ms, r.e2el)
    }
}

/// Mean and percentiles of one metric, in milliseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Distribution {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

impl Distribution {
    pub fn of_seconds(values: &[f64]) -> Self {
        let mut ms: Vec<f64> = values.iter().map(|v| v * 1000.0).collect();
        ms.sort_by(f64::total_cmp);
        if ms.is_empty() {
            return Self::default();
        }
        Self {
            mean: ms.iter().sum::<f64>() / ms.len() as f64,
            p50: percentile(&ms, 50.0),
            p90: percentile(&ms, 90.0),
            p99: percentile(&ms, 99.0),
        }
    }
}

/// Linear interpolation between closest ranks (numpy's default); `sorted` must be sorted.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let rank = p / 100.0 * (n - 1) as f64;
            let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
            sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
        }
    }
}

pub fn tpot(r: &RequestOutcome) -> Option<f64> {
    let ttft = r.ttft?;
    (r.output_tokens > 1).then(|| (r.e2el - ttft) / (r.output_tokens - 1) as f64)
}

/// The outcome of a request the time limit kept from being sent: not a failure.
pub const NOT_SENT: &str = "not sent: time limit reached";

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Summary {
    pub requests: usize,
    pub completed: usize,
    /// Sent, and answered with an error or a short or truncated response.
    pub errors: usize,
    /// Never sent: the time limit came first.
    pub not_sent: usize,
    /// Requests that neither completed nor were counted as errors: always 0 unless the
    /// harness itself is broken.
    pub lost: usize,
    pub error_reasons: BTreeMap<String, usize>,
    pub duration_s: f64,
    pub total_input_tokens: usize,
    /// Of `total_input_tokens`, those the server reported as served from its prefix cache.
    #[serde(default)]
    pub total_cached_tokens: usize,
    pub total_output_tokens: usize,
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub goodput: Option<f64>,
    pub ttft_ms: Distribution,
    pub tpot_ms: Distribution,
    pub itl_ms: Distribution,
    pub e2el_ms: Distribution,
}

/// `outcomes` holds one entry per request that came back; `requests` is how many there were.
pub fn summarize(requests: usize, outcomes: &[RequestOutcome], duration_s: f64, slo: &Slo) -> Summary {
    let ok: Vec<&RequestOutcome> = outcomes.iter().filter(|r| r.error.is_none()).collect();
    let mut error_reasons = BTreeMap::new();
    for r in outcomes.iter().filter_map(|r| r.error.as_deref()).filter(|&e| e != NOT_SENT) {
        *error_reasons.entry(r.to_string()).or_insert(0) += 1;
    }
    let total_input_tokens: usize = ok.iter().map(|r| r.prompt_tokens).sum();
    let total_cached_tokens: usize = ok.iter().map(|r| r.cached_tokens).sum();
    let total_output_tokens: usize = ok.iter().map(|r| r.output_tokens).sum();
    let per_s = |x: f64| if duration_s > 0.0 { x / duration_s } else { 0.0 };
    let ttfts: Vec<f64> = ok.iter().filter_map(|r| r.ttft).collect();
    let tpots: Vec<f64> = ok.iter().filter_map(|r| tpot(r)).collect();
    let itls: Vec<f64> = ok.iter().flat_map(|r| r.itl.iter().copied()).collect();
    let e2els: Vec<f64> = ok.iter().map(|r| r.e2el).collect();
    let not_sent = outcomes.iter().filter(|r| r.error.as_deref() == Some(NOT_SENT)).count();
    let errors = outcomes.len() - ok.len() - not_sent;
    Summary {
        requests,
        completed: ok.len(),
        errors,
        not_sent,
        lost: requests.saturating_sub(outcomes.len()),
        error_reasons,
        duration_s,
        total_input_tokens,
        total_cached_tokens,
        total_output_tokens,
        request_throughput: per_s(ok.len() as f64),
        output_throughput: per_s(total_output_tokens as f64),
        total_token_throughput: per_s((total_input_tokens + total_output_tokens) as f64),
        goodput: slo.is_set().then(|| per_s(ok.iter().filter(|r| slo.met_by(r)).count() as f64)),
        ttft_ms: Distribution::of_seconds(&ttfts),
        tpot_ms: Distribution::of_seconds(&tpots),
        itl_ms: Distribution::of_seconds(&itls),
        e2el_ms: Distribution::of_seconds(&e2els),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(ttft: f64, e2el: f64, n: usize, itl: Vec<f64>) -> RequestOutcome {
        RequestOutcome { ttft: Some(ttft), e2el, output_tokens: n, prompt_tokens: 10, itl, ..Default::default() }
    }

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        // numpy.percentile([1,2,3,4], [50, 90, 99]) = 2.5, 3.7, 3.97
        assert_eq!(percentile(&v, 50.0), 2.5);
        assert!((percentile(&v, 90.0) - 3.7).abs() < 1e-12);
        assert!((percentile(&v, 99.0) - 3.97).abs() < 1e-12);
        assert_eq!(percentile(&[5.0], 99.0), 5.0);
    }

    #[test]
    fn vllm_metric_definitions() {
        let outcomes = vec![
            outcome(0.1, 1.1, 11, vec![0.1; 10]),                                // tpot 0.1
            outcome(0.3, 0.7, 5, vec![0.1; 4]),                                  // tpot 0.1
            RequestOutcome { cached_tokens: 4, ..outcome(0.2, 0.2, 1, vec![]) }, // one token: no tpot
            RequestOutcome { error: Some("HTTP 500: boom".into()), ..Default::default() },
        ];
        let slo = Slo::parse(&["ttft:250".into(), "e2el:1000".into()]).unwrap();
        let s = summarize(5, &outcomes, 2.0, &slo);
        assert_eq!((s.completed, s.errors, s.lost), (3, 1, 1));
        assert_eq!(s.error_reasons.get("HTTP 500: boom"), Some(&1));
        assert_eq!(s.total_output_tokens, 17);
        assert_eq!((s.total_input_tokens, s.total_cached_tokens), (30, 4));
        assert_eq!(s.output_throughput, 8.5);
        assert_eq!(s.request_throughput, 1.5);
        assert_eq!(s.total_token_throughput, (30.0 + 17.0) / 2.0);
        assert!((s.tpot_ms.mean - 100.0).abs() < 1e-9);
        assert!((s.ttft_ms.mean - 200.0).abs() < 1e-9);
        assert!((s.ttft_ms.p50 - 200.0).abs() < 1e-9);
        assert!((s.itl_ms.mean - 100.0).abs() < 1e-9);
        // Only the third request meets ttft <= 250 ms and e2el <= 1 s... and the second
        // (ttft 300 ms) fails, the first (e2el 1.1 s) fails.
        assert_eq!(s.goodput, Some(0.5));
        assert!(Slo::parse(&["latency:5".into()]).is_err());
    }
}
