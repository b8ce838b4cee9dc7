use std::time::Instant;

use entrobatch_model_runner::Tokenizer;
use entrobatch_scheduler::{Appended, Sequence};
use tokio::sync::mpsc::UnboundedSender;

use crate::branching::ActiveBranch;
use crate::detokenizer::Detokenizer;
use crate::event::{Event, FinishReason, GeneratedToken, PromptLogprob};
use crate::in_flight::InFlightPermit;
use crate::metrics::{RequestTimes, TokenTiming};
use crate::prompt_scoring::PromptScoring;
use crate::request::GenerationParams;
use crate::speculative::Speculation;
use crate::stop_checker::{StopChecker, StopOutcome};
use crate::strategy::SequenceStrategy;
use crate::structured::Constraint;

/// What the engine loop keeps for one live request beyond the scheduler's `Sequence`, which
/// owns the tokens, the output's length and its `max_tokens` limit.
pub struct RequestState {
    pub strategy: Box<dyn SequenceStrategy>,
    /// The grammar of a structured-output request; advanced on every committed token.
    pub constraint: Option<Constraint>,
    pub params: GenerationParams,
    pub seed: u64,
    pub num_prompt_tokens: usize,
    pub times: RequestTimes,
    /// Set when the request scores its prompt.
    pub prompt_scoring: Option<PromptScoring>,
    /// Its drafter and acceptance rates, when the request speculates.
    pub speculation: Option<Speculation>,
    /// The continuations a branching request is trying (`Decoding::Branch`).
    pub(crate) branch: Option<ActiveBranch>,
    sender: UnboundedSender<Event>,
    /// The step's tokens not yet sent: a step's tokens (a verified draft, a settled branch)
    /// reach the client as one event, as one chunk of a stream.
    unsent: Option<Unsent>,
    detokenizer: Detokenizer,
    stop_checker: StopChecker,
    /// The stop string that ended the output, once one has.
    matched_stop: Option<String>,
    eos_token_ids: Vec<u32>,
    /// The request's slot under the in-flight bound, freed by `finish`.
    in_flight: InFlightPermit,
}

/// Tokens appended since the last `flush`, and their text.
#[derive(Default)]
struct Unsent {
    tokens: Vec<GeneratedToken>,
    text: String,
}

/// A finished request's token counts, read from its scheduler `Sequence`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SequenceCounts {
    /// Prompt tokens the prefix cache served.
    pub cached_tokens: usize,
    pub completion_tokens: usize,
}

impl SequenceCounts {
    pub fn of(seq: &Sequence) -> Self {
        Self { cached_tokens: seq.num_cached_prompt_tokens(), completion_tokens: seq.num_output_tokens() }
    }
}

impl RequestState {
    pub fn new(
        params: GenerationParams,
        seed: u64,
        num_prompt_tokens: usize,
        sender: UnboundedSender<Event>,
        eos_token_ids: Vec<u32>,
        strategy: Box<dyn SequenceStrategy>,
        in_flight: InFlightPermit,
    ) -> Self {
        let stop_checker = StopChecker::new(params.stop.clone());
        let prompt_scoring = params.prompt_logprobs.map(PromptScoring::new);
        Self {
            strategy,
            constraint: None,
            params,
            seed,
            num_prompt_tokens,
            times: RequestTimes::new(Instant::now()),
            prompt_scoring,
            speculation: None,
            branch: None,
            sender,
            unsent: None,
            detokenizer: Detokenizer::new(),
            stop_checker,
            matched_stop: None,
            eos_token_ids,
            in_flight,
        }
    }

    /// The token ends the output: an EOS the request does not ignore, or one of its stop ids.
    pub(crate) fn ends_output(&self, id: u32) -> bool {
        (!self.params.ignore_eos && self.eos_token_ids.contains(&id)) || self.params.stop_token_ids.contains(&id)
    }

    /// Takes one sampled token (already appended to the scheduler's sequence, whose answer is
    /// `appended`) for the next `flush` and says whether the request is now finished.
    /// `grammar_complete`: a structured output's grammar allows only EOS after this token, so
    /// the request ends now rather than spend a step on it.
    /// Returns `None` while it goes on.
    pub fn append(
        &mut self,
        token: GeneratedToken,
        appended: Appended,
        tokenizer: &Tokenizer,
        grammar_complete: bool,
    ) -> (Option<FinishReason>, TokenTiming) {
        let timing = self.times.on_token(Instant::now());
        let id = token.token_id;
        let is_eos = !self.params.ignore_eos && self.eos_token_ids.contains(&id);
        let is_stop_id = self.params.stop_token_ids.contains(&id);
        let delta = if is_eos || is_stop_id { String::new() } else { self.detokenizer.push(tokenizer, id) };
        let (text, stopped_by_string) = match self.stop_checker.push(&delta) {
            StopOutcome::Continue(text) => (text, false),
            StopOutcome::Stopped { text, stop } => {
                self.matched_stop = Some(stop);
                (text, true)
            }
        };
        let finish = if is_eos || is_stop_id || stopped_by_string || grammar_complete {
            Some(FinishReason::Stop)
        } else if appended.reached_max_tokens {
            Some(FinishReason::Length)
        } else {
            None
        };
        let mut text = text;
        if finish == Some(FinishReason::Length) || (finish.is_some() && !stopped_by_string) {
            let tail = self.detokenizer.flush(tokenizer);
            if let StopOutcome::Continue(t) = self.stop_checker.push(&tail) {
                text.push_str(&t);
            }
            text.push_str(&self.stop_checker.flush());
        }
        let unsent = self.unsent.get_or_insert_with(Unsent::default);
        unsent.tokens.push(token);
        unsent.text.push_str(&text);
        (finish, timing)
    }

    /// Sends the tokens appended since the last flush as one event. `false` when the receiver
    /// is gone (the client went away): the caller finishes the request as aborted so its
    /// blocks are freed.
    pub fn flush(&mut self) -> bool {
        match self.unsent.take() {
            Some(Unsent { tokens, text }) => self.sender.send(Event::Tokens { tokens, text }).is_ok(),
            None => !self.sender.is_closed(),
        }
    }

    /// Streams prompt log-probabilities; a closed receiver is noticed by the next token.
    pub fn send_prompt_logprobs(&self, logprobs: Vec<PromptLogprob>) {
        if !logprobs.is_empty() {
            let _ = self.sender.send(Event::PromptLogprobs(logprobs));
        }
    }

    /// Sends the final event with the counts the scheduler's sequence kept (`Default` for a
    /// request that never reached it), freeing the request's in-flight slot first: whoever
    /// sees the event may read `Engine::in_flight` and must find the request gone.
    pub fn finish(
        mut self,
        reason: FinishReason,
        error: Option<String>,
        counts: SequenceCounts,
        schema_errors: Option<Vec<String>>,
    ) {
        self.flush();
        let Self { in_flight, sender, strategy, num_prompt_tokens, matched_stop, speculation, .. } = self;
        drop(in_flight);
        let _ = sender.send(Event::Finished {
            reason,
            prompt_tokens: num_prompt_tokens,
            cached_tokens: counts.cached_tokens,
            completion_tokens: counts.completion_tokens,
            error,
            strategy_stats: strategy.summary(),
            stop_string: matched_stop,
            schema_errors,
            prediction: speculation.and_then(|s| s.prediction_tokens()),
        });
    }
}
