//! What every source of draft tokens offers the verifier: a guess at what follows.

/// Tokens a drafter guesses will follow, most likely first in the sense that the verifier
/// keeps a prefix of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Draft {
    pub token_ids: Vec<u32>,
    /// How many tokens of context the guess rests on (the n-gram or suffix match length):
    /// longer matches are accepted more often.
    pub match_len: usize,
}

impl Draft {
    pub fn is_empty(&self) -> bool {
        self.token_ids.is_empty()
    }
}

/// A source of drafts. Drafts are deterministic (a point mass on each token), which is what
/// lets verification by the request's own sampler be exact (`verify`); a drafter that samples
/// from a distribution of its own (a draft model) would also have to hand that distribution
/// to the verifier.
pub trait Drafter: Send {
    /// Up to `max_tokens` tokens to follow `token_ids` (prompt then output so far).
    fn propose(&mut self, token_ids: &[u32], max_tokens: usize) -> Draft;
}
