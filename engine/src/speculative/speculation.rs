//! One request's speculation: its drafter, and how often its drafts have been kept.

use super::config::{SpeculativeConfig, SpeculativeMethod};
use super::drafter::{Draft, Drafter};
use super::ngram::PromptLookup;
use super::prediction::Prediction;
use super::suffix::SuffixIndex;
use crate::event::PredictionTokens;
use entrobatch_scheduler::DraftOdds;

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
/// A draft's first token is kept far more often after a long match than after a short one
/// (a two-token n-gram recurs by chance in code), and its own request's history hardly tells:
/// the first token's rate is pooled per match length, 1, 2, 3 and 4 or more tokens.
const MATCH_CLASSES: usize = 4;

fn match_class(match_len: usize) -> usize {
    match_len.clamp(1, MATCH_CLASSES) - 1
}

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

    fn observe(&mut self, (kept, tried): (usize, usize), decay: f64) {
        self.kept = self.kept * decay + kept as f64;
        self.verified = self.verified * decay + tried as f64;
    }
}

/// How one verified draft went, for the engine's pooled rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DraftVerdict {
    /// Confident (0) or unsure (1) start; see `CONFIDENT_ENTROPY`.
    bucket: usize,
    match_class: usize,
    verified: usize,
    accepted: usize,
}

impl DraftVerdict {
    /// The first token (kept, tried): tried in every verified draft.
    fn first(&self) -> (usize, usize) {
        (usize::from(self.accepted > 0), 1)
    }

    /// The tokens after the first (kept, tried): each is tried when the one before it was
    /// kept, so a kept token is a success, the first rejected one a failure, and tokens after
    /// it say nothing.
    fn rest(&self) -> (usize, usize) {
        if self.accepted == 0 {
            return (0, 0);
        }
        (self.accepted - 1, self.accepted.min(self.verified - 1))
    }
}

/// Every request's verdicts pooled, per kind of position. The first draft token's rate, per
/// match length, is taken from here for every draft of the engine's drafter. The rate of the
/// tokens after it is where a request's own rate starts, and returns to while the step has no
/// room for its drafts: a request that arrives at a full batch cannot learn its own rate (a
/// draft at a guessed 0.5 is rarely worth a row there), but its neighbours' drafts say what
/// this workload's drafts are worth.
#[derive(Clone, Copy, Debug)]
pub struct SharedAcceptance {
    first: [[AcceptanceRate; MATCH_CLASSES]; 2],
    rest: [AcceptanceRate; 2],
}

impl Default for SharedAcceptance {
    fn default() -> Self {
        let prior = AcceptanceRate::starting_at(PRIOR_ACCEPTANCE);
        Self { first: [[prior; MATCH_CLASSES]; 2], rest: [prior; 2] }
    }
}

impl SharedAcceptance {
    pub fn record(&mut self, verdict: DraftVerdict) {
        self.first[verdict.bucket][verdict.match_class].observe(verdict.first(), SHARED_DECAY);
        self.rest[verdict.bucket].observe(verdict.rest(), SHARED_DECAY);
    }

    fn first(&self, bucket: usize, match_class: usize) -> f64 {
        self.first[bucket][match_class].rate()
    }

    fn rest(&self, bucket: usize) -> f64 {
        self.rest[bucket].rate()
    }
}

/// The draft being verified.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    bucket: usize,
    match_class: usize,
    from_prediction: bool,
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
    /// The rate of draft tokens after the first, by the entropy where the draft starts:
    /// confident, then unsure. Each starts from the engine's pooled rate when the request
    /// first drafts there.
    rates: [Option<AcceptanceRate>; 2],
    /// The first token's rate of drafts from the client's prediction: the pool holds only the
    /// engine's drafter's.
    prediction_first: AcceptanceRate,
    in_flight: Option<InFlight>,
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
            prediction_first: AcceptanceRate::starting_at(PRIOR_ACCEPTANCE),
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
    /// the odds its tokens are kept; `None` when no drafter has a guess. `entropy`: of the row
    /// the last token was drawn from (a pass over the vocabulary, so taken only when there is a
    /// draft).
    pub fn propose(
        &mut self,
        token_ids: &[u32],
        num_prompt: usize,
        suffix: Option<&SuffixIndex>,
        shared: &SharedAcceptance,
        entropy: impl FnOnce() -> f32,
    ) -> Option<(Vec<u32>, DraftOdds)> {
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
        let Draft { token_ids, match_len } = draft;
        if token_ids.is_empty() {
            return None;
        }
        let bucket = if self.granted { usize::from(entropy() >= CONFIDENT_ENTROPY) } else { self.last_bucket };
        self.last_bucket = bucket;
        let match_class = match_class(match_len);
        self.in_flight = Some(InFlight { bucket, match_class, from_prediction });
        let first = if from_prediction { self.prediction_first.rate() } else { shared.first(bucket, match_class) };
        Some((token_ids, DraftOdds { first, next: self.rate(bucket, shared).rate() }))
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
        let InFlight { bucket, match_class, from_prediction } = self.in_flight.take()?;
        self.granted = verified > 0;
        let rate = self.rate(bucket, shared);
        if verified == 0 {
            rate.relax(shared.rest(bucket));
            return None;
        }
        let verdict = DraftVerdict { bucket, match_class, verified, accepted };
        tracing::trace!(bucket, match_class, verified, accepted, from_prediction, "draft verdict");
        rate.observe(verdict.rest(), DECAY);
        if from_prediction {
            self.prediction_first.observe(verdict.first(), DECAY);
            self.prediction_tokens.accepted += accepted;
            self.prediction_tokens.rejected += verified.saturating_sub(accepted);
            return None;
        }
        Some(verdict)
    }

    /// The request's rate of tokens after the first for `bucket`, starting from the engine's
    /// pooled one.
    fn rate(&mut self, bucket: usize, shared: &SharedAcceptance) -> &mut AcceptanceRate {
        self.rates[bucket].get_or_insert_with(|| AcceptanceRate::starting_at(shared.rest(bucket)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(verified: usize, accepted: usize) -> DraftVerdict {
        DraftVerdict { bucket: 0, match_class: 0, verified, accepted }
    }

    /// `[1, 2, 3, 4]` recurs: a draft resting on a four-token match.
    const LONG_MATCH: [u32; 13] = [1, 2, 3, 4, 5, 6, 7, 9, 9, 1, 2, 3, 4];
    /// Only `[1, 2]` recurs: a two-token match.
    const SHORT_MATCH: [u32; 9] = [8, 1, 2, 5, 6, 7, 7, 1, 2];

    #[test]
    fn the_first_token_is_counted_apart_and_nothing_after_the_first_rejection_counts() {
        assert_eq!((verdict(8, 2).first(), verdict(8, 2).rest()), ((1, 1), (1, 2)));
        assert_eq!((verdict(8, 0).first(), verdict(8, 0).rest()), ((0, 1), (0, 0)));
        assert_eq!((verdict(4, 4).first(), verdict(4, 4).rest()), ((1, 1), (3, 3)));
        assert_eq!((verdict(1, 1).first(), verdict(1, 1).rest()), ((1, 1), (0, 0)));
        let mut rate = AcceptanceRate { kept: 0.0, verified: 0.0 };
        rate.observe(verdict(8, 3).rest(), DECAY);
        assert!((rate.rate() - 2.0 / 3.0).abs() < 1e-12);
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
        let tokens = LONG_MATCH;
        for _ in 0..10 {
            assert!(s.propose(&tokens, 0, None, &shared, || 0.1).is_some());
            s.observe(3, 3, &shared);
            assert!(s.propose(&tokens, 0, None, &shared, || 2.0).is_some());
            s.observe(3, 1, &shared);
        }
        let confident = s.propose(&tokens, 0, None, &shared, || 0.1).map(|d| d.1.next).unwrap();
        // Not granted: the next draft skips the entropy and keeps the last bucket.
        assert_eq!(s.observe(0, 0, &shared), None);
        let kept =
            s.propose(&tokens, 0, None, &shared, || panic!("entropy taken for a draft with no room")).map(|d| d.1);
        assert!(kept.unwrap().next > 0.9);
        s.observe(3, 3, &shared);
        s.observe(0, 0, &shared);
        let unsure = s.propose(&tokens, 0, None, &shared, || 2.0).map(|d| d.1.next).unwrap();
        assert!(confident > 0.9 && unsure < 0.1, "confident {confident}, unsure {unsure}");
    }

    #[test]
    fn a_new_request_starts_from_what_earlier_requests_drafts_were_worth() {
        let tokens = LONG_MATCH;
        let mut shared = SharedAcceptance::default();
        let mut first = Speculation::new(&SpeculativeConfig::ngram());
        let before = first.propose(&tokens, 0, None, &shared, || 0.1).map(|d| d.1);
        assert_eq!(before, Some(DraftOdds::uniform(PRIOR_ACCEPTANCE)));
        for _ in 0..200 {
            first.propose(&tokens, 0, None, &shared, || 0.1);
            let verdict = first.observe(4, 4, &shared).expect("a verified draft has a verdict");
            shared.record(verdict);
            first.propose(&tokens, 0, None, &shared, || 2.0);
            shared.record(first.observe(4, 1, &shared).unwrap());
        }
        let mut second = Speculation::new(&SpeculativeConfig::ngram());
        let confident = second.propose(&tokens, 0, None, &shared, || 0.1).map(|d| d.1.next).unwrap();
        assert!(confident > 0.95, "confident positions start at the pooled rate, not the prior: {confident}");
        // The step never has room: the rate stays where the engine's drafts say it should be.
        for _ in 0..50 {
            second.observe(0, 0, &shared);
            second.propose(&tokens, 0, None, &shared, || unreachable!());
        }
        assert!(second.propose(&tokens, 0, None, &shared, || 0.1).map(|d| d.1.next).unwrap() > 0.95);
        let mut third = Speculation::new(&SpeculativeConfig::ngram());
        let unsure = third.propose(&tokens, 0, None, &shared, || 2.0).map(|d| d.1).unwrap();
        assert!(unsure.next < 0.05, "unsure positions keep their own pooled rate: {unsure:?}");
        assert!(unsure.first > 0.95, "their first tokens were kept: {unsure:?}");
    }

    #[test]
    fn the_first_token_rate_is_the_pools_for_the_drafts_match_length() {
        let mut shared = SharedAcceptance::default();
        let mut s = Speculation::new(&SpeculativeConfig::ngram());
        // Drafts on two-token matches miss at once; those on four-token matches are kept.
        for _ in 0..300 {
            s.propose(&SHORT_MATCH, 0, None, &shared, || 0.1);
            shared.record(s.observe(4, 0, &shared).unwrap());
            s.propose(&LONG_MATCH, 0, None, &shared, || 0.1);
            shared.record(s.observe(4, 4, &shared).unwrap());
        }
        let short = s.propose(&SHORT_MATCH, 0, None, &shared, || 0.1).map(|d| d.1).unwrap();
        s.observe(0, 0, &shared);
        let long = s.propose(&LONG_MATCH, 0, None, &shared, || 0.1).map(|d| d.1).unwrap();
        assert!(short.first < 0.05 && long.first > 0.95, "short {short:?}, long {long:?}");
        // Misses at the first token say nothing of how a draft goes once it is on track.
        assert!(short.next > 0.95 && long.next > 0.95, "short {short:?}, long {long:?}");
        // A fresh request drafting on a short match starts from the pool too.
        let mut fresh = Speculation::new(&SpeculativeConfig::ngram());
        assert!(fresh.propose(&SHORT_MATCH, 0, None, &shared, || 0.1).unwrap().1.first < 0.05);
    }
}
