//! Server-sent events over a request's stream. The SSE body owns the `RequestHandle`: when
//! the client goes away hyper drops the body, the handle drops with it, and dropping a
//! handle aborts the request and frees its blocks.

use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use entrobatch::{Event, FinishReason, GeneratedToken, PromptLogprob, RequestHandle};
use futures::StreamExt;
use serde::Serialize;

use super::error::ApiError;
use super::{ErrorBody, Usage};

/// How one endpoint renders its chunks.
pub trait StreamFormat: Send + 'static {
    type Chunk: Serialize + Send;
    /// Chunks sent before the first token (chat's role delta).
    fn opening(&mut self) -> Vec<Self::Chunk> {
        Vec::new()
    }
    fn on_tokens(&mut self, tokens: &[GeneratedToken], text: &str) -> Vec<Self::Chunk>;
    /// Prompt log-probabilities, before any token (completions' `echo` and `prompt_logprobs`).
    fn on_prompt_logprobs(&mut self, _logprobs: Vec<PromptLogprob>) {}
    /// The closing chunk(s) carrying `finish_reason`.
    /// The closing chunks; `schema_errors` is the engine's check of a JSON schema output.
    fn on_finish(&mut self, reason: FinishReason, schema_errors: Option<Vec<String>>) -> Vec<Self::Chunk>;
    /// The `choices: []` chunk carrying `usage` (`stream_options.include_usage`).
    fn usage_chunk(&self, usage: Usage) -> Self::Chunk;
    /// The chunk with every choice numbered `index` (formats number their choices 0).
    fn with_index(chunk: Self::Chunk, index: usize) -> Self::Chunk;
}

/// One `data:` payload: a chunk, or the error that ended the stream.
#[derive(Serialize)]
#[serde(untagged)]
enum Payload<C> {
    Chunk(C),
    Error(ErrorBody),
}

impl<C: Serialize> Payload<C> {
    fn event(&self) -> SseEvent {
        match serde_json::to_string(self) {
            Ok(json) => SseEvent::default().data(json),
            // Not reachable with the response types (string keys, no fallible fields), but a
            // stream must end with something a client can read rather than a panic.
            Err(e) => SseEvent::default().data(
                serde_json::to_string(&ApiError::internal(format!("cannot encode a chunk: {e}")).body())
                    .unwrap_or_default(),
            ),
        }
    }
}

/// One choice of a response: its format and whether its request has finished.
struct ChoiceStream<F> {
    format: F,
    finished: bool,
}

type Merged = futures::stream::SelectAll<futures::stream::BoxStream<'static, (usize, Option<Event>)>>;

/// The streams of a response's choices (`n` copies of each prompt, prompt-major), merged as
/// their events arrive: chunks of different choices interleave, each with its own `index`,
/// as OpenAI streams them.
struct SseState<F> {
    merged: Merged,
    choices: Vec<ChoiceStream<F>>,
    /// Copies per prompt: each prompt's tokens count once in `usage`.
    n: usize,
    usage: Usage,
    include_usage: bool,
    opened: bool,
    done: bool,
}

impl<F: StreamFormat> SseState<F> {
    fn new(handles: Vec<(RequestHandle, F)>, n: usize, include_usage: bool) -> Self {
        let mut choices = Vec::with_capacity(handles.len());
        let mut merged = futures::stream::SelectAll::new();
        for (index, (handle, format)) in handles.into_iter().enumerate() {
            choices.push(ChoiceStream { format, finished: false });
            // A `None` after the handle's events: the stream ended, finished or not.
            let events = StreamExt::map(handle, move |e| (index, Some(e)))
                .chain(futures::stream::once(async move { (index, None) }));
            merged.push(events.boxed());
        }
        Self { merged, choices, n: n.max(1), usage: Usage::new(0, 0, 0), include_usage, opened: false, done: false }
    }

    fn indexed(chunks: Vec<F::Chunk>, index: usize) -> Vec<Payload<F::Chunk>> {
        chunks.into_iter().map(|c| Payload::Chunk(F::with_index(c, index))).collect()
    }

    async fn next_chunks(&mut self) -> Vec<Payload<F::Chunk>> {
        if !self.opened {
            self.opened = true;
            let opening: Vec<_> =
                (0..self.choices.len()).flat_map(|i| Self::indexed(self.choices[i].format.opening(), i)).collect();
            if !opening.is_empty() {
                return opening;
            }
        }
        loop {
            let Some((index, event)) = self.merged.next().await else {
                self.done = true;
                return Vec::new();
            };
            let choice = &mut self.choices[index];
            match event {
                Some(Event::PromptLogprobs(logprobs)) => choice.format.on_prompt_logprobs(logprobs),
                Some(Event::Tokens { tokens, text }) => {
                    let chunks = choice.format.on_tokens(&tokens, &text);
                    if !chunks.is_empty() {
                        return Self::indexed(chunks, index);
                    }
                }
                Some(Event::Finished {
                    reason,
                    prompt_tokens,
                    cached_tokens,
                    completion_tokens,
                    error,
                    schema_errors,
                    strategy_stats,
                    prediction,
                    ..
                }) => {
                    choice.finished = true;
                    if reason == FinishReason::Error {
                        // One failed choice fails the response; dropping the rest aborts them.
                        self.done = true;
                        let message = error.unwrap_or_else(|| "generation failed".into());
                        return vec![Payload::Error(ApiError::internal(message).body())];
                    }
                    let first_copy = index % self.n == 0;
                    self.usage.add(
                        if first_copy { prompt_tokens } else { 0 },
                        if first_copy { cached_tokens } else { 0 },
                        completion_tokens,
                    );
                    self.usage.add_branch_tokens(strategy_stats.as_ref());
                    self.usage.add_prediction(prediction);
                    let mut chunks = Self::indexed(choice.format.on_finish(reason, schema_errors), index);
                    if self.choices.iter().all(|c| c.finished) {
                        self.done = true;
                        if self.include_usage {
                            chunks.push(Payload::Chunk(self.choices[0].format.usage_chunk(self.usage.clone())));
                        }
                    }
                    return chunks;
                }
                None if choice.finished => {}
                None => {
                    self.done = true;
                    let error = ApiError::unavailable("the engine stopped before the request finished");
                    return vec![Payload::Error(error.body())];
                }
            }
        }
    }
}

/// The streaming response of a request's choices (`n` per prompt, prompt-major): one `data:`
/// line per chunk, then `data: [DONE]`.
pub fn sse_response<F: StreamFormat>(handles: Vec<(RequestHandle, F)>, n: usize, include_usage: bool) -> Response {
    let state = SseState::new(handles, n, include_usage);
    let events = futures::stream::unfold(state, |mut state| async move {
        if state.done {
            return None;
        }
        let mut events: Vec<SseEvent> = state.next_chunks().await.iter().map(Payload::event).collect();
        if state.done {
            events.push(SseEvent::default().data("[DONE]"));
        }
        Some((events, state))
    })
    .flat_map(|events| futures::stream::iter(events.into_iter().map(Ok::<_, Infallible>)));
    Sse::new(events).into_response()
}
