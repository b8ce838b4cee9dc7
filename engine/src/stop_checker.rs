/// Finds stop strings in streamed text and holds back any tail that could still become one,
/// so a client never sees part of a stop string that the final text omits.
#[derive(Debug, Default)]
pub struct StopChecker {
    stops: Vec<String>,
    text: String,
    sent: usize,
}

pub enum StopOutcome {
    /// Text that is safe to emit now.
    Continue(String),
    /// A stop string matched: emit `text` (what came before it) and finish; `stop` is the
    /// stop string that matched.
    Stopped { text: String, stop: String },
}

impl StopChecker {
    pub fn new(stops: Vec<String>) -> Self {
        let stops = stops.into_iter().filter(|s| !s.is_empty()).collect();
        Self { stops, text: String::new(), sent: 0 }
    }

    pub fn push(&mut self, delta: &str) -> StopOutcome {
        let search_from = self.text.len().saturating_sub(self.max_stop_len());
        self.text.push_str(delta);
        if let Some((pos, stop)) = self.first_match(search_from) {
            let piece = self.text.get(self.sent..pos).unwrap_or_default().to_string();
            self.text.truncate(pos);
            self.sent = pos;
            return StopOutcome::Stopped { text: piece, stop };
        }
        let mut safe_end = self.text.len() - self.held_back_len();
        while !self.text.is_char_boundary(safe_end) {
            safe_end -= 1;
        }
        let piece = self.text.get(self.sent..safe_end).unwrap_or_default().to_string();
        self.sent = self.sent.max(safe_end);
        StopOutcome::Continue(piece)
    }

    /// The held-back tail, once the stream ends without a stop string.
    pub fn flush(&mut self) -> String {
        let piece = self.text.get(self.sent..).unwrap_or_default().to_string();
        self.sent = self.text.len();
        piece
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    fn max_stop_len(&self) -> usize {
        self.stops.iter().map(String::len).max().unwrap_or(0)
    }

    /// The earliest match at or after `from` and its stop string (the longest, when several
    /// start there).
    fn first_match(&self, from: usize) -> Option<(usize, String)> {
        let mut from = from;
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        self.stops
            .iter()
            .filter_map(|s| self.text[from..].find(s.as_str()).map(|p| (p + from, s)))
            .min_by_key(|(p, s)| (*p, std::cmp::Reverse(s.len())))
            .map(|(p, s)| (p, s.clone()))
    }

    /// Longest suffix of the text that is a proper prefix of some stop string.
    fn held_back_len(&self) -> usize {
        let bytes = self.text.as_bytes();
        self.stops
            .iter()
            .flat_map(|s| (1..s.len()).rev().map(move |k| (s, k)))
            .filter(|(s, k)| bytes.len() >= *k && bytes.ends_with(&s.as_bytes()[..*k]))
            .map(|(_, k)| k)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], deltas: &[&str]) -> (String, bool) {
        let mut checker = StopChecker::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for d in deltas {
            match checker.push(d) {
                StopOutcome::Continue(p) => out.push_str(&p),
                StopOutcome::Stopped { text, .. } => {
                    out.push_str(&text);
                    return (out, true);
                }
            }
        }
        out.push_str(&checker.flush());
        (out, false)
    }

    #[test]
    fn stop_string_split_across_deltas_is_never_emitted() {
        let (out, stopped) = run(&["END"], &["abc E", "N", "D tail"]);
        assert!(stopped);
        assert_eq!(out, "abc ");
    }

    #[test]
    fn partial_match_that_fails_is_released() {
        let (out, stopped) = run(&["END"], &["x E", "Nx", " y"]);
        assert!(!stopped);
        assert_eq!(out, "x ENx y");
    }

    #[test]
    fn the_matched_stop_string_is_reported() {
        let mut checker = StopChecker::new(vec!["world".into(), "lo w".into(), "lo".into()]);
        // "lo" and "lo w" both start at 3: the longer one is the match reported.
        let StopOutcome::Stopped { text, stop } = checker.push("hello world") else { panic!("no stop") };
        assert_eq!((text.as_str(), stop.as_str()), ("hel", "lo w"));
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        let (out, stopped) = run(&["world", "lo w"], &["hello world"]);
        assert!(stopped);
        assert_eq!(out, "hel");
    }

    #[test]
    fn multibyte_text_is_not_split() {
        let (out, _) = run(&["é!"], &["caf", "é", "é?"]);
        assert_eq!(out, "caféé?");
    }
}
