//! One request's speculation: its drafter, and how often its drafts have been kept.

use super::config::{SpeculativeConfig, SpeculativeMethod};
use super::drafter::{Draft, Drafter};
use super::ngram::PromptLookup;
use super::prediction::Prediction;
use super::suffix::SuffixIndex;
use crate::event::PredictionTokens;

/// Below this entropy (nats) at the row a draft starts from, the model was sure of its last
/// token: copying regions (code being repeated, a quoted passage) look like this, and drafts
/// made there are kept far more often than in free text. The two kinds of position keep
/// separate acceptance rates, so a request that copies in places speculates long there and
/// little elsewhere.
const CONFIDENT_ENTROPY: f32 = 0.5;

/// A draft token's chance of being kept before any request's draft has been verified.
const PRIOR_ACCEPTANCE: f64 = 0.5;
/// Weight of the prior in draft tokens, and how fast old verdicts fade: the rate follows a
/// request that moves from copying to writing within a few drafts.
const PRIOR_WEIGHT: f64 = 2.0;
const DECAY: f64 = 0.9;
/// The engine's pooled rate fades over the last few hundred verified draft tokens of all
/// requests: the current workload, not one request's last draft.
const SHARED_DECAY: f64 = 0.99;

/// Kept draft tokens over verified ones, exponentially weighted.
#[derive(Clone, Copy, Debug)]
struct AcceptanceRate {
    kept: f64,
    verified: f64,
}

impl AcceptanceRate {
    fn starting_at(rate: f64) -> Self {
        Self { kept: rate * PRIOR_WEIGHT, verified: PRIOR_WEIGHT }
    }

    /// The chance that a draft token is kept given the one before it was: each kept token is
    /// a success, the first rejected one a failure, tokens after it were never tried.
    fn rate(&self) -> f64 {
        self.kept / self.verified
    }

    /// A draft the step had no room for says nothing about acceptance, but a rate so low that
    /// no draft is granted would never be corrected: unverified drafts pull it back toward
    /// `prior`, so the request tries again later.
    fn relax(&mut self, prior: f64) {
        self.kept = self.kept * DECAY + (1.0 - DECAY) * prior * PRIOR_WEIGHT;
        self.verified = self.verified * DECAY + (1.0 - DECAY) * PRIOR_WEIGHT;
    }

    fn observe(&mut self, verdict: DraftVerdict, decay: f64) {
        let tried = (verdict.accepted + 1).min(verdict.verified);
        self.kept = self.kept * decay + verdict.accepted as f64;
        self.verified = self.verified * decay + tried as f64;
    }
}

/// How one verified draft went, for the engine's pooled rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DraftVerdict {
    /// Confident (0) or unsure (1) start; see `CONFIDENT_ENTROPY`.
    bucket: usize,
    verified: usize,
    accepted: usize,
}

/// Every request's verdicts pooled, per kind of position: the rate a request starts from,
/// and returns to while the step has no room for its drafts. A request that arrives at a
/// full batch cannot learn its own rate (a draft at a guessed 0.5 is rarely worth a row
/// there), but its neighbours' drafts say what this workload's drafts are worth.
#[derive(Clone, Copy, Debug)]
pub struct SharedAcceptance {
    rates: [AcceptanceRate; 2],
}

impl Default for SharedAcceptance {
    fn default() -> Self {
        Self { rates: [AcceptanceRate::starting_at(PRIOR_ACCEPTANCE); 2] }
    }
}

impl SharedAcceptance {
    pub fn record(&mut self, verdict: DraftVerdict) {
        self.rates[verdict.bucket].observe(verdict, SHARED_DECAY);
    }

    fn rate(&self, bucket: usize) -> f64 {
        self.rates[bucket].rate()
    }
}

/// Cloned for a request's `n` copies before any of them drafts.
#[derive(Clone)]
pub struct Speculation {
    /// `None`: the engine has no drafter and the request drafts from its prediction alone.
    lookup: Option<PromptLookup>,
    method: SpeculativeMethod,
    /// The client's predicted output, drafted from unless the engine's drafter matches more
    /// of the context.
    prediction: Option<Prediction>,
    prediction_tokens: PredictionTokens,
    max_draft: usize,
    /// By the entropy where the draft starts: confident, then unsure. Each starts from the
    /// engine's pooled rate when the request first drafts there.
    rates: [Option<AcceptanceRate>; 2],
    /// The bucket of the draft being verified, and whether it came from the prediction.
    in_flight: Option<(usize, bool)>,
    /// Whether the last draft was granted rows. The entropy is a pass over the vocabulary (a
    /// few percent of a step at a full batch of a 152k-vocabulary model), worth paying only
    /// while drafts are being verified; while the step has no room for them the draft keeps
    /// the last bucket.
    granted: bool,
    last_bucket: usize,
}

impl Speculation {
    /// Drafts from the engine's drafter (`config`).
    pub fn new(config: &SpeculativeConfig) -> Self {
        Self {
            lookup: Some(PromptLookup::new(config.prompt_lookup_min, config.prompt_lookup_max)),
            method: config.method,
            prediction: None,
            prediction_tokens: PredictionTokens::default(),
            max_draft: config.num_speculative_tokens,
            rates: [None; 2],
            in_flight: None,
            granted: true,
            last_bucket: 0,
        }
    }

    /// Drafts from a client's predicted output alone, on an engine with no drafter: `config`
    /// gives only the draft length.
    pub fn predicted(config: &SpeculativeConfig, prediction: Vec<u32>) -> Self {
        Self { lookup: None, ..Self::new(config).with_prediction(prediction) }
    }

    /// Drafts from the predicted output, or from the engine's drafter where its match is
    /// longer or the prediction has no guess.
    pub fn with_prediction(self, prediction: Vec<u32>) -> Self {
        Self { prediction: Some(Prediction::new(prediction)), ..self }
    }

    /// The verified draft tokens that came from the prediction; `None` without one.
    pub fn prediction_tokens(&self) -> Option<PredictionTokens> {
        self.prediction.as_ref().map(|_| self.prediction_tokens)
    }

    /// A draft to follow `token_ids` (the prompt's `num_prompt` tokens, then the output) and
    /// the chance each of its tokens is kept given the one before; `None` when no drafter has
    /// a guess. `entropy`: of the row the last token was drawn from (a pass over the
    /// vocabulary, so taken only when there is a draft).
    pub fn propose(
        &mut self,
        token_ids: &[u32],
        num_prompt: usize,
        suffix: Option<&SuffixIndex>,
        shared: &SharedAcceptance,
        entropy: impl FnOnce() -> f32,
    ) -> Option<(Vec<u32>, f64)> {
        let output = token_ids.get(num_prompt..).unwrap_or(&[]);
        let predicted = self.prediction.as_mut().map(|p| p.propose(output, self.max_draft)).unwrap_or_default();
        // The longer match wins, the prediction on a tie: it is the client's word on the answer.
        // A prediction matching as long as the engine's drafter ever can spares its scan.
        let prediction_wins = |match_len: usize| !predicted.is_empty() && predicted.match_len >= match_len;
        let looked_up = if prediction_wins(self.longest_lookup_match()) {
            Draft::default()
        } else {
            self.lookup_draft(token_ids, suffix)
        };
        let from_prediction = prediction_wins(looked_up.match_len);
        let draft = if from_prediction { predicted } else { looked_up };
        let Draft { token_ids, .. } = draft;
        if token_ids.is_empty() {
            return None;
        }
        let bucket = if self.granted { usize::from(entropy() >= CONFIDENT_ENTROPY) } else { self.last_bucket };
        self.last_bucket = bucket;
        self.in_flight = Some((bucket, from_prediction));
        Some((token_ids, self.rate(bucket, shared).rate()))
    }

    /// The longest match the engine's drafter can rest a draft on: prompt lookup's longest
    /// n-gram; the suffix index has no bound.
    fn longest_lookup_match(&self) -> usize {
        match (&self.lookup, self.method) {
            (None, _) => 0,
            (Some(lookup), SpeculativeMethod::Ngram) => lookup.max_n,
            (Some(_), _) => usize::MAX,
        }
    }

    /// The engine's drafter: prompt lookup, or the suffix index where its match is longer.
    fn lookup_draft(&mut self, token_ids: &[u32], suffix: Option<&SuffixIndex>) -> Draft {
        let Some(lookup) = self.lookup.as_mut() else { return Draft::default() };
        let mut draft = lookup.propose(token_ids, self.max_draft);
        if let (SpeculativeMethod::Suffix, Some(index)) = (self.method, suffix) {
            let shared = index.propose(token_ids, self.max_draft);
            if shared.match_len > draft.match_len || draft.is_empty() {
                draft = shared;
            }
        }
        draft
    }

    /// The verdict on the last draft: `verified` tokens tried (fewer than proposed when the
    /// step had no room; none when it had none), `accepted` kept. Returns the verdict for the
    /// engine's pooled rate when the engine's drafter made the draft and it was verified: a
    /// client's prediction says nothing about what other requests' drafts are worth.
    pub fn observe(&mut self, verified: usize, accepted: usize, shared: &SharedAcceptance) -> Option<DraftVerdict> {
        let (bucket, from_prediction) = self.in_flight.take()?;
        self.granted = verified > 0;
        let rate = self.rate(bucket, shared);
        if verified == 0 {
            rate.relax(shared.rate(bucket));
            return None;
        }
        let verdict = DraftVerdict { bucket, verified, accepted };
        rate.observe(verdict, DECAY);
        if from_prediction {
            self.prediction_tokens.accepted += accepted;
            self.prediction_tokens.rejected += verified.saturating_sub(accepted);
            return None;
        }
        Some(verdict)
    }

    /// The request's rate for `bucket`, starting from the engine's pooled one.
    fn rate(&mut self, bucket: usize, shared: &SharedAcceptance) -> &mut AcceptanceRate {
        self.rates[bucket].get_or_insert_with(|| AcceptanceRate::starting_at(shared.rate(bucket)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(bucket: usize, verified: usize, accepted: usize) -> DraftVerdict {
        DraftVerdict { bucket, verified, accepted }
    }

    #[test]
    fn the_rate_counts_the_first_rejection_and_nothing_after_it() {
        let mut rate = AcceptanceRate { kept: 0.0, verified: 0.0 };
        rate.observe(verdict(0, 8, 2), DECAY);
        assert!((rate.rate() - 2.0 / 3.0).abs() < 1e-12);
        let mut all = AcceptanceRate { kept: 0.0, verified: 0.0 };
        all.observe(verdict(0, 4, 4), DECAY);
        assert_eq!(all.rate(), 1.0);
        let mut low = AcceptanceRate { kept: 0.0, verified: 10.0 };
        for _ in 0..100 {
            low.relax(0.7);
        }
        assert!((low.rate() - 0.7).abs() < 0.01, "an unverified rate returns to the prior");
    }

    #[test]
    fn confident_and_unsure_positions_learn_their_own_rates() {
        let shared = SharedAcceptance::default();
        let mut s = Speculation::new(&SpeculativeConfig::ngram());
        let tokens = [1, 2, 3, 4, 5, 1, 2, 3];
        for _ in 0..10 {
            assert!(s.propose(&tokens, 0, None, &shared, || 0.1).is_some());
            s.observe(2, 2, &shared);
            assert!(s.propose(&tokens, 0, None, &shared, || 2.0).is_some());
            s.observe(2, 0, &shared);
        }
        let confident = s.propose(&tokens, 0, None, &shared, || 0.1).map(|d| d.1).unwrap();
        // Not granted: the next draft skips the entropy and keeps the last bucket.
        assert_eq!(s.observe(0, 0, &shared), None);
        let kept =
            s.propose(&tokens, 0, None, &shared, || panic!("entropy taken for a draft with no room")).map(|d| d.1);
        assert!(kept.unwrap() > 0.9);
        s.observe(3, 3, &shared);
        s.observe(0, 0, &shared);
        let unsure = s.propose(&tokens, 0, None, &shared, || 2.0).map(|d| d.1).unwrap();
        assert!(confident > 0.9 && unsure < 0.1, "confident {confident}, unsure {unsure}");
    }

    #[test]
    fn a_new_request_starts_from_what_earlier_requests_drafts_were_worth() {
        let tokens = [1, 2, 3, 4, 5, 1, 2, 3];
        let mut shared = SharedAcceptance::default();
        let mut first = Speculation::new(&SpeculativeConfig::ngram());
        assert_eq!(first.propose(&tokens, 0, None, &shared, || 0.1).map(|d| d.1), Some(PRIOR_ACCEPTANCE));
        for _ in 0..200 {
            first.propose(&tokens, 0, None, &shared, || 0.1);
            let verdict = first.observe(4, 4, &shared).expect("a verified draft has a verdict");
            shared.record(verdict);
            first.propose(&tokens, 0, None, &shared, || 2.0);
            shared.record(first.observe(4, 0, &shared).unwrap());
        }
        let mut second = Speculation::new(&SpeculativeConfig::ngram());
        let confident = second.propose(&tokens, 0, None, &shared, || 0.1).map(|d| d.1).unwrap();
        assert!(confident > 0.95, "confident positions start at the pooled rate, not the prior: {confident}");
        // The step never has room: the rate stays where the engine's drafts say it should be.
        for _ in 0..50 {
            second.observe(0, 0, &shared);
            second.propose(&tokens, 0, None, &shared, || unreachable!());
        }
        assert!(second.propose(&tokens, 0, None, &shared, || 0.1).map(|d| d.1).unwrap() > 0.95);
        let mut third = Speculation::new(&SpeculativeConfig::ngram());
        let unsure = third.propose(&tokens, 0, None, &shared, || 2.0).map(|d| d.1).unwrap();
        assert!(unsure < 0.05, "unsure positions keep their own pooled rate: {unsure}");
    }
}
