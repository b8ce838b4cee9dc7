//! Server-sent events over a request's stream. The SSE body owns the `RequestHandle`: when
//! the client goes away hyper drops the body, the handle drops with it, and dropping a
//! handle aborts the request and frees its blocks.

use std::convert::Infallible;

use crate::{Event, FinishReason, GeneratedToken, PromptLogprob, RequestHandle};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Serialize;

use super::error::ApiError;
use super::response::{ErrorBody, Usage};

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
    fn on_finish(&mut self, reason: FinishReason) -> Vec<Self::Chunk>;
    /// The `choices: []` chunk carrying `usage` (`stream_options.include_usage`).
    fn usage_chunk(&self, usage: Usage) -> Self::Chunk;
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

struct SseState<F> {
    handle: RequestHandle,
    format: F,
    include_usage: bool,
    opened: bool,
    done: bool,
}

impl<F: StreamFormat> SseState<F> {
    async fn next_chunks(&mut self) -> Vec<Payload<F::Chunk>> {
        if !self.opened {
            self.opened = true;
            let opening = self.format.opening();
            if !opening.is_empty() {
                return opening.into_iter().map(Payload::Chunk).collect();
            }
        }
        loop {
            match self.handle.next_async().await {
                Some(Event::PromptLogprobs(logprobs)) => self.format.on_prompt_logprobs(logprobs),
                Some(Event::Tokens { tokens, text }) => {
                    let chunks = self.format.on_tokens(&tokens, &text);
                    if !chunks.is_empty() {
                        return chunks.into_iter().map(Payload::Chunk).collect();
                    }
                }
                Some(Event::Finished { reason, prompt_tokens, cached_tokens, completion_tokens, error, .. }) => {
                    self.done = true;
                    if reason == FinishReason::Error {
                        let message = error.unwrap_or_else(|| "generation failed".into());
                        return vec![Payload::Error(ApiError::internal(message).body())];
                    }
                    let mut chunks = self.format.on_finish(reason);
                    if self.include_usage {
                        chunks.push(self.format.usage_chunk(Usage::new(
                            prompt_tokens,
                            cached_tokens,
                            completion_tokens,
                        )));
                    }
                    return chunks.into_iter().map(Payload::Chunk).collect();
                }
                None => {
                    self.done = true;
                    let error = ApiError::unavailable("the engine stopped before the request finished");
                    return vec![Payload::Error(error.body())];
                }
            }
        }
    }
}

/// The streaming response: one `data:` line per chunk, then `data: [DONE]`.
pub fn sse_response<F: StreamFormat>(handle: RequestHandle, format: F, include_usage: bool) -> Response {
    let state = SseState { handle, format, include_usage, opened: false, done: false };
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
