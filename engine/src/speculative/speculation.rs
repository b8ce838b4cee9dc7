//! One request's speculation: its drafter, and how often its drafts have been kept.

use super::config::{SpeculativeConfig, SpeculativeMethod};
use super::drafter::{Draft, Drafter};
use super::ngram::PromptLookup;
use super::suffix::SuffixIndex;

/// Below this entropy (nats) at the row a draft starts from, the model was sure of its last
/// token: copying regions (code being repeated, a quoted passage) look like this, and drafts
/// made there are kept far more often than in free text. The two kinds of position keep
/// separate acceptance rates, so a request that copies in places speculates long there and
/// little elsewhere.
const CONFIDENT_ENTROPY: f32 = 0.5;

/// A draft token's chance of being kept before anything is known about the request.
const PRIOR_ACCEPTANCE: f64 = 0.5;
/// Weight of the prior in draft tokens, and how fast old verdicts fade: the rate follows a
/// request that moves from copying to writing within a few drafts.
const PRIOR_WEIGHT: f64 = 2.0;
const DECAY: f64 = 0.9;

/// Kept draft tokens over verified ones, exponentially weighted.
#[derive(Clone, Copy, Debug)]
struct AcceptanceRate {
    kept: f64,
    verified: f64,
}

impl Default for AcceptanceRate {
    fn default() -> Self {
        Self { kept: PRIOR_ACCEPTANCE * PRIOR_WEIGHT, verified: PRIOR_WEIGHT }
    }
}

impl AcceptanceRate {
    /// The chance that a draft token is kept given the one before it was: each kept token is
    /// a success, the first rejected one a failure, tokens after it were never tried.
    fn rate(&self) -> f64 {
        self.kept / self.verified
    }

    /// A draft the step had no room for says nothing about acceptance, but a rate so low that
    /// no draft is granted would never be corrected: unverified drafts pull it back toward
    /// the prior, so the request tries again later.
    fn relax(&mut self) {
        self.kept = self.kept * DECAY + (1.0 - DECAY) * PRIOR_ACCEPTANCE * PRIOR_WEIGHT;
        self.verified = self.verified * DECAY + (1.0 - DECAY) * PRIOR_WEIGHT;
    }

    fn observe(&mut self, verified: usize, accepted: usize) {
        let tried = (accepted + 1).min(verified);
        self.kept = self.kept * DECAY + accepted as f64;
        self.verified = self.verified * DECAY + tried as f64;
    }
}

pub struct Speculation {
    lookup: PromptLookup,
    method: SpeculativeMethod,
    max_draft: usize,
    /// By the entropy where the draft starts: confident, then unsure.
    rates: [AcceptanceRate; 2],
    /// The bucket of the draft being verified.
    in_flight: Option<usize>,
    /// Whether the last draft was granted rows. The entropy is a pass over the vocabulary (a
    /// few percent of a step at a full batch of a 152k-vocabulary model), worth paying only
    /// while drafts are being verified; while the step has no room for them the draft keeps
    /// the last bucket.
    granted: bool,
    last_bucket: usize,
}

impl Speculation {
    pub fn new(config: &SpeculativeConfig) -> Self {
        Self {
            lookup: PromptLookup::new(config.prompt_lookup_min, config.prompt_lookup_max),
            method: config.method,
            max_draft: config.num_speculative_tokens,
            rates: [AcceptanceRate::default(); 2],
            in_flight: None,
            granted: true,
            last_bucket: 0,
        }
    }

    /// A draft to follow `token_ids` and the chance each of its tokens is kept given the one
    /// before; `None` when no drafter has a guess. `entropy`: of the row the last token was
    /// drawn from (a pass over the vocabulary, so taken only when there is a draft).
    pub fn propose(
        &mut self,
        token_ids: &[u32],
        suffix: Option<&SuffixIndex>,
        entropy: impl FnOnce() -> f32,
    ) -> Option<(Vec<u32>, f64)> {
        let mut draft = self.lookup.propose(token_ids, self.max_draft);
        if let (SpeculativeMethod::Suffix, Some(index)) = (self.method, suffix) {
            let shared = index.propose(token_ids, self.max_draft);
            if shared.match_len > draft.match_len || draft.is_empty() {
                draft = shared;
            }
        }
        let Draft { token_ids, .. } = draft;
        if token_ids.is_empty() {
            return None;
        }
        let bucket = if self.granted { usize::from(entropy() >= CONFIDENT_ENTROPY) } else { self.last_bucket };
        self.last_bucket = bucket;
        self.in_flight = Some(bucket);
        Some((token_ids, self.rates[bucket].rate()))
    }

    /// The verdict on the last draft: `verified` tokens tried (fewer than proposed when the
    /// step had no room; none when it had none), `accepted` kept.
    pub fn observe(&mut self, verified: usize, accepted: usize) {
        if let Some(bucket) = self.in_flight.take() {
            self.granted = verified > 0;
            if verified > 0 {
                self.rates[bucket].observe(verified, accepted);
            } else {
                self.rates[bucket].relax();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_counts_the_first_rejection_and_nothing_after_it() {
        let mut rate = AcceptanceRate { kept: 0.0, verified: 0.0 };
        rate.observe(8, 2);
        assert!((rate.rate() - 2.0 / 3.0).abs() < 1e-12);
        let mut all = AcceptanceRate { kept: 0.0, verified: 0.0 };
        all.observe(4, 4);
        assert_eq!(all.rate(), 1.0);
        let mut low = AcceptanceRate { kept: 0.0, verified: 10.0 };
        for _ in 0..100 {
            low.relax();
        }
        assert!((low.rate() - PRIOR_ACCEPTANCE).abs() < 0.01, "an unverified rate returns to the prior");
    }

    #[test]
    fn confident_and_unsure_positions_learn_their_own_rates() {
        let mut s = Speculation::new(&SpeculativeConfig::ngram());
        let tokens = [1, 2, 3, 4, 5, 1, 2, 3];
        for _ in 0..10 {
            assert!(s.propose(&tokens, None, || 0.1).is_some());
            s.observe(2, 2);
            assert!(s.propose(&tokens, None, || 2.0).is_some());
            s.observe(2, 0);
        }
        let confident = s.propose(&tokens, None, || 0.1).map(|d| d.1).unwrap();
        // Not granted: the next draft skips the entropy and keeps the last bucket.
        s.observe(0, 0);
        let kept = s.propose(&tokens, None, || panic!("entropy taken for a draft with no room")).map(|d| d.1);
        assert!(kept.unwrap() > 0.9);
        s.observe(3, 3);
        s.observe(0, 0);
        let unsure = s.propose(&tokens, None, || 2.0).map(|d| d.1).unwrap();
        assert!(confident > 0.9 && unsure < 0.1, "confident {confident}, unsure {unsure}");
    }
}
