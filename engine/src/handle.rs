//! `RequestHandle`: one submitted request's side of the engine, a stream of its events for
//! sync or async code that can abort it (and does, when dropped early); and
//! `GenerationOutput`, the stream collected into one value.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use crossbeam_channel::Sender;
use futures::Stream;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::command::Command;
use crate::event::{Event, FinishReason, GeneratedToken, PredictionTokens, PromptLogprob, RequestId};

/// A submitted request's output: a stream of events usable from sync code (`Iterator`,
/// blocking) or async code (`Stream`). Dropping it aborts the request.
pub struct RequestHandle {
    pub id: RequestId,
    pub prompt_token_ids: Vec<u32>,
    events: UnboundedReceiver<Event>,
    commands: Sender<Command>,
    finished: bool,
}

/// A request's complete output, as `generate` and the CLI's `--json` report it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GenerationOutput {
    pub id: RequestId,
    pub prompt_token_ids: Vec<u32>,
    pub token_ids: Vec<u32>,
    pub tokens: Vec<GeneratedToken>,
    pub text: String,
    pub finish_reason: FinishReason,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
    pub error: Option<String>,
    /// The strategy's per-request statistics, from `Event::Finished`.
    pub strategy_stats: Option<serde_json::Value>,
    /// Prompt positions 1.. (`GenerationParams::prompt_logprobs`); empty unless asked.
    pub prompt_logprobs: Vec<PromptLogprob>,
    /// The stop string that ended the output, from `Event::Finished`.
    #[serde(default)]
    pub stop_string: Option<String>,
    /// The schema check of `Event::Finished`.
    #[serde(default)]
    pub schema_errors: Option<Vec<String>>,
    /// How a predicted output fared as drafts (`Event::Finished`).
    #[serde(default)]
    pub prediction: Option<PredictionTokens>,
    /// When the first output tokens reached this handle: what a time to first token or a
    /// split of prompt and generation time is measured against. `None` when none came.
    #[serde(skip)]
    pub first_token_at: Option<Instant>,
}

impl RequestHandle {
    pub(crate) fn new(
        id: RequestId,
        prompt_token_ids: Vec<u32>,
        events: UnboundedReceiver<Event>,
        commands: Sender<Command>,
    ) -> Self {
        Self { id, prompt_token_ids, events, commands, finished: false }
    }

    /// Asks the engine to stop this request; its blocks are freed on the next loop turn and
    /// the stream ends with `FinishReason::Abort`.
    pub fn abort(&self) {
        let _ = self.commands.send(Command::Abort(self.id));
    }

    /// Blocks for the next event (sync code only; inside a tokio runtime use the Stream).
    pub fn next_blocking(&mut self) -> Option<Event> {
        if self.finished {
            return None;
        }
        let event = self.events.blocking_recv();
        self.mark_if_final(&event);
        event
    }

    pub async fn next_async(&mut self) -> Option<Event> {
        if self.finished {
            return None;
        }
        let event = self.events.recv().await;
        self.mark_if_final(&event);
        event
    }

    /// Drains the stream into one output (blocking).
    pub fn collect_blocking(mut self) -> GenerationOutput {
        let mut output = self.empty_output();
        while let Some(event) = self.next_blocking() {
            output.absorb(event);
        }
        output
    }

    pub async fn collect_async(mut self) -> GenerationOutput {
        let mut output = self.empty_output();
        while let Some(event) = self.next_async().await {
            output.absorb(event);
        }
        output
    }

    fn empty_output(&self) -> GenerationOutput {
        GenerationOutput {
            id: self.id,
            prompt_token_ids: self.prompt_token_ids.clone(),
            token_ids: Vec::new(),
            tokens: Vec::new(),
            text: String::new(),
            finish_reason: FinishReason::Error,
            cached_tokens: 0,
            error: Some("the engine stopped before the request finished".into()),
            strategy_stats: None,
            prompt_logprobs: Vec::new(),
            stop_string: None,
            schema_errors: None,
            prediction: None,
            first_token_at: None,
        }
    }

    /// A `Finished` event, or a closed channel, ends the stream: later reads return `None`
    /// and dropping the handle no longer aborts.
    fn mark_if_final(&mut self, event: &Option<Event>) {
        if matches!(event, None | Some(Event::Finished { .. })) {
            self.finished = true;
        }
    }
}

impl GenerationOutput {
    fn absorb(&mut self, event: Event) {
        match event {
            Event::PromptLogprobs(logprobs) => self.prompt_logprobs.extend(logprobs),
            Event::Tokens { tokens, text } => {
                if !tokens.is_empty() {
                    self.first_token_at.get_or_insert_with(Instant::now);
                }
                self.token_ids.extend(tokens.iter().map(|t| t.token_id));
                self.tokens.extend(tokens);
                self.text.push_str(&text);
            }
            Event::Finished {
                reason,
                error,
                strategy_stats,
                cached_tokens,
                stop_string,
                schema_errors,
                prediction,
                ..
            } => {
                self.prediction = prediction;
                self.schema_errors = schema_errors;
                self.finish_reason = reason;
                self.stop_string = stop_string;
                self.cached_tokens = cached_tokens;
                self.error = error;
                self.strategy_stats = strategy_stats;
            }
        }
    }
}

impl Iterator for RequestHandle {
    type Item = Event;
    fn next(&mut self) -> Option<Event> {
        self.next_blocking()
    }
}

impl Stream for RequestHandle {
    type Item = Event;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        if self.finished {
            return Poll::Ready(None);
        }
        let polled = self.events.poll_recv(cx);
        if let Poll::Ready(event) = &polled {
            let event = event.clone();
            self.mark_if_final(&event);
        }
        polled
    }
}

impl Drop for RequestHandle {
    fn drop(&mut self) {
        if !self.finished {
            self.abort();
        }
    }
}
