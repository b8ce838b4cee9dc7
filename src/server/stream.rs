//! Server-sent events over a request's stream. The SSE body owns the `RequestHandle`: when
//! the client goes away hyper drops the body, the handle drops with it, and dropping a
//! handle aborts the request and frees its blocks.

use std::convert::Infallible;

use crate::{Event, FinishReason, GeneratedToken, RequestHandle};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{json, Value};

use super::error::ApiError;

/// How one endpoint renders its chunks.
pub trait StreamFormat: Send + 'static {
    /// Chunks sent before the first token (chat's role delta).
    fn opening(&mut self) -> Vec<Value> {
        Vec::new()
    }
    fn on_tokens(&mut self, tokens: &[GeneratedToken], text: &str) -> Vec<Value>;
    /// The closing chunk(s) carrying `finish_reason`.
    fn on_finish(&mut self, reason: FinishReason) -> Vec<Value>;
    /// The `choices: []` chunk carrying `usage` (`stream_options.include_usage`).
    fn usage_chunk(&self, usage: Value) -> Value;
}

pub fn usage_json(prompt_tokens: usize, cached_tokens: usize, completion_tokens: usize) -> Value {
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": { "cached_tokens": cached_tokens },
    })
}

struct SseState<F> {
    handle: RequestHandle,
    format: F,
    include_usage: bool,
    opened: bool,
    done: bool,
}

impl<F: StreamFormat> SseState<F> {
    async fn next_chunks(&mut self) -> Vec<Value> {
        if !self.opened {
            self.opened = true;
            let opening = self.format.opening();
            if !opening.is_empty() {
                return opening;
            }
        }
        loop {
            match self.handle.next_async().await {
                Some(Event::Tokens { tokens, text }) => {
                    let chunks = self.format.on_tokens(&tokens, &text);
                    if !chunks.is_empty() {
                        return chunks;
                    }
                }
                Some(Event::Finished { reason, prompt_tokens, cached_tokens, completion_tokens, error, .. }) => {
                    self.done = true;
                    if reason == FinishReason::Error {
                        let message = error.unwrap_or_else(|| "generation failed".into());
                        return vec![ApiError::internal(message).body()];
                    }
                    let mut chunks = self.format.on_finish(reason);
                    if self.include_usage {
                        chunks.push(self.format.usage_chunk(usage_json(
                            prompt_tokens,
                            cached_tokens,
                            completion_tokens,
                        )));
                    }
                    return chunks;
                }
                None => {
                    self.done = true;
                    return vec![ApiError::unavailable("the engine stopped before the request finished").body()];
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
        let mut events: Vec<SseEvent> =
            state.next_chunks().await.into_iter().map(|c| SseEvent::default().data(c.to_string())).collect();
        if state.done {
            events.push(SseEvent::default().data("[DONE]"));
        }
        Some((events, state))
    })
    .flat_map(|events| futures::stream::iter(events.into_iter().map(Ok::<_, Infallible>)));
    Sse::new(events).into_response()
}
