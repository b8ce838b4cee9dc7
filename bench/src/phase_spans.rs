//! How long a throughput run spent prefilling and decoding, from each request's first-token
//! and end times. A step mixes prompt chunks and decodes, so the phases overlap; each is
//! measured as the time during which at least one request was in it:
//! - decode: the union of `[first token, end]` over requests;
//! - prefill: the union of `[admitted, first token]`, where a request is admitted when it is
//!   submitted (time 0) if a slot is free, else when the request holding the slot ends. The
//!   engine admits first come, first served, so with `concurrency` slots request `i` (in
//!   submission order) starts when the `(i - concurrency)`-th earliest request ends.
//!
//! With every request running at once this is prefill over `[0, last first token]` and decode
//! over `[first first token, last end]`; one at a time, it is the sums of the requests' own
//! times to first token and decode times, so batch-1 rates are per-request rates.

/// When one request produced its first token and when it ended, in seconds from the run's
/// start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestTimes {
    pub first_token: f64,
    pub end: f64,
}

/// (prefill seconds, decode seconds) of `times` (submission order) run `concurrency` at a time.
pub fn phase_secs(times: &[RequestTimes], concurrency: usize) -> (f64, f64) {
    let mut ends: Vec<f64> = times.iter().map(|t| t.end).collect();
    ends.sort_by(f64::total_cmp);
    let slots = concurrency.max(1);
    let admitted = |i: usize| if i < slots { 0.0 } else { ends[i - slots] };
    let prefill = times.iter().enumerate().map(|(i, t)| (admitted(i), t.first_token)).collect();
    let decode = times.iter().map(|t| (t.first_token, t.end)).collect();
    (union_secs(prefill), union_secs(decode))
}

/// Seconds covered by at least one of `spans` (`(start, end)`; empty or reversed ones count 0).
pub fn union_secs(mut spans: Vec<(f64, f64)>) -> f64 {
    spans.retain(|(s, e)| e > s);
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut total = 0.0;
    let mut current: Option<(f64, f64)> = None;
    for (s, e) in spans {
        current = match current {
            Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    total + current.map_or(0.0, |(s, e)| e - s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(first_token: f64, end: f64) -> RequestTimes {
        RequestTimes { first_token, end }
    }

    #[test]
    fn the_union_counts_overlaps_once_and_gaps_not_at_all() {
        assert_eq!(union_secs(vec![(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (5.5, 5.8), (7.0, 7.0)]), 4.0);
        assert_eq!(union_secs(vec![]), 0.0);
    }

    #[test]
    fn one_at_a_time_gives_each_requests_own_times() {
        // Three requests back to back: TTFTs 0.1, 0.2, 0.3; decodes 0.9, 1.0, 1.1 s.
        let times = [t(0.1, 1.0), t(1.2, 2.2), t(2.5, 3.6)];
        let (prefill, decode) = phase_secs(&times, 1);
        assert!((prefill - 0.6).abs() < 1e-12, "{prefill}");
        assert!((decode - 3.0).abs() < 1e-12, "{decode}");
    }

    #[test]
    fn all_at_once_spans_from_start_to_the_last_first_token_and_from_the_first_to_the_end() {
        let times = [t(0.5, 4.0), t(0.2, 3.0), t(0.8, 5.0)];
        assert_eq!(phase_secs(&times, 8), (0.8, 4.8));
    }

    #[test]
    fn a_queued_request_starts_when_the_earliest_running_one_ends() {
        // Two slots, three requests: the third is admitted at 2.0, when the second ends.
        let times = [t(0.3, 3.0), t(0.4, 2.0), t(2.5, 4.0)];
        let (prefill, decode) = phase_secs(&times, 2);
        assert!((prefill - (0.4 + 0.5)).abs() < 1e-12, "{prefill}");
        assert!((decode - 3.7).abs() < 1e-12, "{decode}");
    }
}
