//! Prompt lookup decoding: the request's own prompt and output as the draft source.

use super::drafter::{Draft, Drafter};

/// Looks up the sequence's last `n` tokens (longest `n` first, from `max_n` down to `min_n`)
/// at their latest earlier occurrence and proposes what followed it there.
#[derive(Clone, Debug)]
pub struct PromptLookup {
    pub min_n: usize,
    pub max_n: usize,
}

impl PromptLookup {
    pub fn new(min_n: usize, max_n: usize) -> Self {
        Self { min_n: min_n.max(1), max_n: max_n.max(min_n.max(1)) }
    }
}

impl Drafter for PromptLookup {
    fn propose(&mut self, token_ids: &[u32], max_tokens: usize) -> Draft {
        let len = token_ids.len();
        if max_tokens == 0 {
            return Draft::default();
        }
        for n in (self.min_n..=self.max_n).rev() {
            if n >= len {
                continue;
            }
            let suffix = &token_ids[len - n..];
            // Latest earlier occurrence that has at least one token after it (not the suffix itself).
            let found = (0..len - n).rev().find(|&start| &token_ids[start..start + n] == suffix);
            if let Some(start) = found {
                let from = start + n;
                let to = (from + max_tokens).min(len);
                return Draft { token_ids: token_ids[from..to].to_vec(), match_len: n };
            }
        }
        Draft::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposes_what_followed_the_latest_longest_match() {
        let mut d = PromptLookup::new(1, 3);
        // ... 1 2 3 [9 9] ... 7 2 3 [5 6] ... 1 2 3 -> the 3-gram "1 2 3" matches at 0.
        let tokens = [1, 2, 3, 9, 9, 7, 2, 3, 5, 6, 1, 2, 3];
        assert_eq!(d.propose(&tokens, 2), Draft { token_ids: vec![9, 9], match_len: 3 });
        // Only a 2-gram matches: its latest occurrence wins.
        let tokens = [2, 3, 9, 7, 2, 3, 5, 6, 2, 3];
        assert_eq!(d.propose(&tokens, 5), Draft { token_ids: vec![5, 6, 2, 3], match_len: 2 });
        assert!(PromptLookup::new(2, 3).propose(&[1, 2, 3, 4], 4).is_empty());
        assert!(d.propose(&tokens, 0).is_empty());
    }

    #[test]
    fn a_draft_runs_up_to_the_end_of_what_is_known() {
        let mut d = PromptLookup::new(2, 2);
        // The match's continuation overlaps the suffix itself (a repeating pattern).
        let tokens = [4, 5, 4, 5, 4, 5];
        assert_eq!(d.propose(&tokens, 8).token_ids, vec![4, 5]);
    }
}
