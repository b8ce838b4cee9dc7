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
//!
//! At high concurrency the decode span is mostly steps that also carry prompt chunks, so it
//! says little about what a decode step costs. The decode-only window is the decode span less
//! the prefill span: the time during which every running request was decoding. Tokens that
//! arrived inside it, over its length, are the rate of steps with no prompt in them.

/// When one request produced its first token and when it ended, in seconds from the run's
/// start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestTimes {
    pub first_token: f64,
    pub end: f64,
}

/// (prefill seconds, decode seconds) of `times` (submission order) run `concurrency` at a time.
pub fn phase_secs(times: &[RequestTimes], concurrency: usize) -> (f64, f64) {
    let (prefill, decode) = phase_spans(times, concurrency);
    (union_secs(prefill), union_secs(decode))
}

/// What the decode-only window delivered.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodeOnly {
    pub tokens_per_s: f64,
    pub secs: f64,
    /// Requests decoding, averaged over the window's time. Requests end one after another
    /// inside it, so this is what its rate is a rate of: fewer rows a step than `concurrency`
    /// unless every request decodes to the window's end.
    pub mean_decoding: f64,
}

/// The decode-only window's rate, length and mean rows; None when no time was decode-only.
/// `arrivals`: (seconds from the start, tokens) of every token event of the run. A window
/// opens when a step's tokens arrive (the step that finished the last prompt is not in it), so
/// a token counts when it arrives after the window's start and by its end.
pub fn decode_only_rate(times: &[RequestTimes], concurrency: usize, arrivals: &[(f64, usize)]) -> Option<DecodeOnly> {
    let (prefill, decode) = phase_spans(times, concurrency);
    let windows = subtract(&merged(decode.clone()), &merged(prefill));
    let secs: f64 = windows.iter().map(|(s, e)| e - s).sum();
    let tokens: usize =
        arrivals.iter().filter(|(at, _)| windows.iter().any(|(s, e)| at > s && at <= e)).map(|(_, n)| n).sum();
    let overlap = |(a, b): Span| windows.iter().map(|&(s, e)| (b.min(e) - a.max(s)).max(0.0)).sum::<f64>();
    let decoding_secs: f64 = decode.into_iter().map(overlap).sum();
    (secs > 0.0).then(|| DecodeOnly { tokens_per_s: tokens as f64 / secs, secs, mean_decoding: decoding_secs / secs })
}

/// (start, end) in seconds from the run's start.
type Span = (f64, f64);

/// Each request's (admitted, first token) and (first token, end) spans (see the module doc).
fn phase_spans(times: &[RequestTimes], concurrency: usize) -> (Vec<Span>, Vec<Span>) {
    let mut ends: Vec<f64> = times.iter().map(|t| t.end).collect();
    ends.sort_by(f64::total_cmp);
    let slots = concurrency.max(1);
    let admitted = |i: usize| if i < slots { 0.0 } else { ends[i - slots] };
    let prefill = times.iter().enumerate().map(|(i, t)| (admitted(i), t.first_token)).collect();
    let decode = times.iter().map(|t| (t.first_token, t.end)).collect();
    (prefill, decode)
}

/// Seconds covered by at least one of `spans` (`(start, end)`; empty or reversed ones count 0).
pub fn union_secs(spans: Vec<(f64, f64)>) -> f64 {
    merged(spans).iter().map(|(s, e)| e - s).sum()
}

/// `spans` merged into disjoint spans in order (empty or reversed ones dropped).
fn merged(mut spans: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    spans.retain(|(s, e)| e > s);
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(spans.len());
    for (s, e) in spans {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The parts of `spans` outside `holes` (both disjoint and in order, as `merged` leaves them).
fn subtract(spans: &[(f64, f64)], holes: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for &(s, e) in spans {
        let mut start = s;
        for &(hs, he) in holes.iter().filter(|(hs, he)| *he > s && *hs < e) {
            if hs > start {
                out.push((start, hs));
            }
            start = start.max(he);
        }
        if e > start {
            out.push((start, e));
        }
    }
    out
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
    fn the_decode_only_window_is_decoding_with_no_prompt_waiting() {
        // All at once: prompts done by 0.8; every request decodes until 3.0, two until 4.0,
        // one until 5.0. Arrivals every 0.1 s, one token for each request still running.
        let times = [t(0.5, 4.0), t(0.2, 3.0), t(0.8, 5.0)];
        let arrivals: Vec<(f64, usize)> = (1..=50)
            .map(|i| i as f64 / 10.0)
            .map(|at| (at, times.iter().filter(|t| at >= t.first_token && at <= t.end).count()))
            .collect();
        let DecodeOnly { tokens_per_s: rate, secs, mean_decoding } = decode_only_rate(&times, 8, &arrivals).unwrap();
        assert!((secs - 4.2).abs() < 1e-9, "{secs}");
        // (0.8, 3.0]: 22 arrivals of 3; (3.0, 4.0]: 10 of 2; (4.0, 5.0]: 10 of 1.
        let tokens = 22 * 3 + 10 * 2 + 10;
        assert!((rate - tokens as f64 / 4.2).abs() < 1e-6, "{rate}");
        // 2.2 s of three requests, 1.0 of two, 1.0 of one.
        assert!((mean_decoding - (2.2 * 3.0 + 2.0 + 1.0) / 4.2).abs() < 1e-9, "{mean_decoding}");
    }

    #[test]
    fn a_queued_prompt_closes_the_window_while_it_waits() {
        // Two slots, three requests: the third is admitted at 2.0 and waits until 2.5, so
        // (2.0, 2.5] is not decode-only; neither is anything before 0.4.
        let times = [t(0.3, 3.0), t(0.4, 2.0), t(2.5, 4.0)];
        let arrivals = [(0.35, 1), (1.0, 2), (2.2, 1), (2.6, 2), (3.5, 1)];
        let DecodeOnly { tokens_per_s: rate, secs, mean_decoding } = decode_only_rate(&times, 2, &arrivals).unwrap();
        assert!((secs - (1.6 + 1.5)).abs() < 1e-9, "{secs}");
        assert!((rate - 5.0 / 3.1).abs() < 1e-9, "{rate}");
        // (0.4, 2.0]: two decoding; (2.5, 3.0]: two; (3.0, 4.0]: one.
        assert!((mean_decoding - (1.6 * 2.0 + 0.5 * 2.0 + 1.0) / 3.1).abs() < 1e-9, "{mean_decoding}");
    }

    #[test]
    fn batch_one_decode_only_is_the_requests_decode_rate() {
        let times = [t(0.1, 1.0), t(1.2, 2.2)];
        let arrivals: Vec<(f64, usize)> = [0.1, 0.4, 0.7, 1.0, 1.2, 1.7, 2.2].iter().map(|&at| (at, 1)).collect();
        let (prefill, decode) = phase_secs(&times, 1);
        let DecodeOnly { tokens_per_s: rate, secs, mean_decoding } = decode_only_rate(&times, 1, &arrivals).unwrap();
        assert!((secs - decode).abs() < 1e-12 && prefill > 0.0);
        assert!((rate - 5.0 / 1.9).abs() < 1e-9, "{rate}");
        assert!((mean_decoding - 1.0).abs() < 1e-12, "{mean_decoding}");
    }

    #[test]
    fn no_decode_only_time_gives_none() {
        // One request whose prompt is prefilled while the other decodes, and which ends last.
        let times = [t(0.5, 1.0), t(1.0, 1.0)];
        assert_eq!(decode_only_rate(&times, 8, &[(0.7, 1)]), None);
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
