//! A predicted output (OpenAI's Predicted Outputs: `prediction: {"type": "content", ...}`) as
//! the draft source: the text the client expects most of the answer to repeat, such as the
//! file a code edit returns with a few lines changed.

use std::sync::Arc;

use super::drafter::Draft;

/// The longest run of the output's last tokens looked up in the prediction when the output
/// has left it (an edit) and is to be aligned with it again: longer runs tell repeated
/// lines apart.
const MAX_REALIGN_N: usize = 8;

/// The prediction's tokens and where the output stands in them.
#[derive(Clone, Debug)]
pub struct Prediction {
    /// Shared by a request's `n` copies, which each follow it at their own pace.
    token_ids: Arc<[u32]>,
    /// Where the last draft started in the prediction, and the output's length then: the
    /// output is expected to advance through the prediction at its own pace from there.
    aligned: Option<(usize, usize)>,
}

impl Prediction {
    pub fn new(token_ids: Vec<u32>) -> Self {
        Self { token_ids: token_ids.into(), aligned: None }
    }

    /// Up to `max_tokens` tokens of the prediction to follow `output` (the generated tokens
    /// only, not the prompt). An empty output starts at the prediction's start. Otherwise the
    /// output's last token continuing the prediction where it was expected to be is followed
    /// on; failing that, the longest run of the output's last tokens found in the prediction,
    /// at the occurrence nearest where the output was expected, re-aligns it (after an edit,
    /// the model picks the copy up again); a single token only where the prediction holds it
    /// once. Empty when the output matches nothing.
    pub fn propose(&mut self, output: &[u32], max_tokens: usize) -> Draft {
        let m = output.len();
        let p = &self.token_ids;
        let expected = match self.aligned {
            Some((start, at)) if m >= at => start + (m - at),
            _ => 0,
        };
        let found = if m == 0 {
            // The client's word on how the answer starts: as sure as the longest run.
            Some((0, MAX_REALIGN_N))
        } else if expected >= 1 && expected < p.len() && p[expected - 1] == output[m - 1] {
            let run = (1..=MAX_REALIGN_N.min(m).min(expected)).take_while(|&k| p[expected - k] == output[m - k]);
            Some((expected, run.count()))
        } else {
            (1..=MAX_REALIGN_N.min(m)).rev().find_map(|n| {
                let tail = &output[m - n..];
                // Ends of occurrences that leave something to propose.
                let mut ends = (n..p.len()).filter(|&end| &p[end - n..end] == tail);
                if n == 1 {
                    // One token (a newline, an indent) says where the copy resumes only
                    // when the prediction holds it once.
                    let first = ends.next()?;
                    return ends.next().is_none().then_some((first, 1));
                }
                // Nearest `expected` first (ahead of it on a tie: the output moves forward).
                ends.min_by_key(|&end| (end.abs_diff(expected), end < expected)).map(|end| (end, n))
            })
        };
        let Some((start, match_len)) = found else { return Draft::default() };
        self.aligned = Some((start, m));
        let end = (start + max_tokens).min(p.len());
        Draft { token_ids: p[start..end].to_vec(), match_len }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_output_starts_at_the_start_and_a_copy_is_followed() {
        let mut p = Prediction::new(vec![10, 11, 12, 13, 14, 15]);
        assert_eq!(p.propose(&[], 3).token_ids, vec![10, 11, 12]);
        // Two of the three kept, then the model's own token equals the prediction's next.
        assert_eq!(p.propose(&[10, 11, 12], 3), Draft { token_ids: vec![13, 14, 15], match_len: 3 });
        assert!(p.propose(&[10, 11, 12, 13, 14, 15], 3).is_empty(), "nothing left to propose");
    }

    #[test]
    fn after_an_edit_the_copy_is_picked_up_at_the_nearest_occurrence() {
        // A "line" 1 2 3 repeated: an edit (99 in place of 5) in the second copy, then the
        // output goes on with 3 as the prediction does at index 6.
        let prediction = vec![1, 2, 3, 4, 1, 2, 3, 5, 6, 1, 2, 3, 7];
        let mut p = Prediction::new(prediction);
        assert_eq!(p.propose(&[], 8).token_ids, vec![1, 2, 3, 4, 1, 2, 3, 5]);
        // Kept up to "1 2 3", then the model wrote 99 instead of 5: no continuation there.
        let output = [1, 2, 3, 4, 1, 2, 3, 99];
        assert!(p.propose(&output, 4).is_empty(), "99 is nowhere in the prediction");
        // The model goes on with 6: the 2-gram "99 6" is not there, 6 is, once.
        let output = [1, 2, 3, 4, 1, 2, 3, 99, 6];
        assert_eq!(p.propose(&output, 4), Draft { token_ids: vec![1, 2, 3, 7], match_len: 1 });
        // "1 2 3" occurs three times: the occurrence nearest where the output is expected
        // wins over the first and the latest.
        let mut p = Prediction::new(vec![1, 2, 3, 4, 1, 2, 3, 5, 6, 1, 2, 3, 7]);
        p.propose(&[], 8);
        let output = [1, 2, 3, 4, 8, 1, 2, 3];
        assert_eq!(p.propose(&output, 2), Draft { token_ids: vec![5, 6], match_len: 3 });
        // A single token the prediction holds twice re-aligns nothing.
        let mut p = Prediction::new(vec![1, 2, 3, 4, 1, 5]);
        p.propose(&[], 2);
        assert!(p.propose(&[9, 1], 2).is_empty());
    }

    #[test]
    fn an_output_unlike_the_prediction_gets_no_draft() {
        let mut p = Prediction::new(vec![1, 2, 3]);
        assert!(p.propose(&[7, 8, 9], 4).is_empty());
        assert!(Prediction::new(Vec::new()).propose(&[], 4).is_empty());
    }
}
