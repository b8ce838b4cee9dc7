use std::time::Instant;

use entrobatch_model_runner::GgufTokenizer;
use tokio::sync::mpsc::UnboundedSender;

use crate::detokenizer::Detokenizer;
use crate::event::{Event, FinishReason, GeneratedToken};
use crate::request::GenerationParams;
use crate::stop_checker::{StopChecker, StopOutcome};
use crate::strategy::SequenceStrategy;
use crate::structured::Constraint;

/// What the engine loop keeps for one live request beyond the scheduler's `Sequence`.
pub struct RequestState {
    pub strategy: Box<dyn SequenceStrategy>,
    /// The grammar of a structured-output request; advanced on every committed token.
    pub constraint: Option<Constraint>,
    pub params: GenerationParams,
    pub seed: u64,
    pub num_prompt_tokens: usize,
    pub num_output_tokens: usize,
    pub submitted_at: Instant,
    last_token_at: Option<Instant>,
    sender: UnboundedSender<Event>,
    detokenizer: Detokenizer,
    stop_checker: StopChecker,
    eos_token_ids: Vec<u32>,
}

/// Latencies of one appended token, for the metrics histograms.
pub struct TokenTiming {
    pub time_to_first_token: Option<f64>,
    pub inter_token_latency: Option<f64>,
}

impl RequestState {
    pub fn new(
        params: GenerationParams,
        seed: u64,
        num_prompt_tokens: usize,
        sender: UnboundedSender<Event>,
        eos_token_ids: Vec<u32>,
        strategy: Box<dyn SequenceStrategy>,
    ) -> Self {
        let stop_checker = StopChecker::new(params.stop.clone());
        Self {
            strategy,
            constraint: None,
            params,
            seed,
            num_prompt_tokens,
            num_output_tokens: 0,
            submitted_at: Instant::now(),
            last_token_at: None,
            sender,
            detokenizer: Detokenizer::new(),
            stop_checker,
            eos_token_ids,
        }
    }

    /// Streams one sampled token and says whether the request is now finished.
    /// `grammar_complete`: a structured output's grammar allows only EOS after this token, so
    /// the request ends now rather than spend a step on it.
    /// Returns `None` while it goes on. A closed receiver (the client went away) finishes
    /// the request as aborted so its blocks are freed.
    pub fn append(
        &mut self,
        token: GeneratedToken,
        tokenizer: &GgufTokenizer,
        grammar_complete: bool,
    ) -> (Option<FinishReason>, TokenTiming) {
        let now = Instant::now();
        let timing = TokenTiming {
            time_to_first_token: self.last_token_at.is_none().then(|| (now - self.submitted_at).as_secs_f64()),
            inter_token_latency: self.last_token_at.map(|t| (now - t).as_secs_f64()),
        };
        self.last_token_at = Some(now);
        self.num_output_tokens += 1;
        let id = token.token_id;
        let is_eos = !self.params.ignore_eos && self.eos_token_ids.contains(&id);
        let is_stop_id = self.params.stop_token_ids.contains(&id);
        let delta = if is_eos || is_stop_id { String::new() } else { self.detokenizer.push(tokenizer, id) };
        let (text, stopped_by_string) = match self.stop_checker.push(&delta) {
            StopOutcome::Continue(text) => (text, false),
            StopOutcome::Stopped(text) => (text, true),
        };
        let mut finish = if is_eos || is_stop_id || stopped_by_string || grammar_complete {
            Some(FinishReason::Stop)
        } else if self.num_output_tokens >= self.params.max_tokens {
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
        let event = Event::Tokens { tokens: vec![token], text };
        if self.sender.send(event).is_err() {
            finish = Some(FinishReason::Abort);
        }
        (finish, timing)
    }

    /// Sends the final event; `cached_tokens`: prompt tokens the prefix cache served.
    pub fn finish(&self, reason: FinishReason, error: Option<String>, cached_tokens: usize) {
        let _ = self.sender.send(Event::Finished {
            reason,
            prompt_tokens: self.num_prompt_tokens,
            cached_tokens,
            completion_tokens: self.num_output_tokens,
            error,
            strategy_stats: self.strategy.summary(),
        });
    }
}
