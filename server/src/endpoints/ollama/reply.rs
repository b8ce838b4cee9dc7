//! An Ollama reply, whole or as NDJSON lines: decided pieces of the output (text, thinking,
//! tool calls) as chat messages or generate responses, the final line with `done: true`, the
//! stop reason, counts and durations. The stream owns the request's handle: a client that
//! hangs up aborts the request.

use std::convert::Infallible;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use entrobatch::{Event, FinishReason, GeneratedToken, GenerationOutput, RequestHandle};
use futures::StreamExt;

use super::response::{Chunk, ChunkBody, ErrorBody, OutFunction, OutMessage, OutToolCall, Stats};
use crate::endpoints::chat::{call_arguments, chat_logprobs, ReplyParser, ReplyPiece};
use crate::response::collect::{check_finish, check_output};
use crate::response::error::ApiError;
use crate::response::TokenExtras;
use crate::state::AppState;

/// Which of Ollama's bodies the reply takes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Chat,
    Generate,
}

pub struct Reply {
    pub state: AppState,
    pub shape: Shape,
    pub parser: ReplyParser,
    pub logprobs: bool,
    pub return_metrics: bool,
    /// When the request arrived: the durations count from here.
    pub arrived: Instant,
    first_token: Option<Instant>,
    calls: usize,
}

/// How the output ended, for the final line.
struct Ending {
    reason: FinishReason,
    prompt_tokens: usize,
    completion_tokens: usize,
    /// The engine's check of a JSON schema output (see `TokenExtras`).
    schema_errors: Option<Vec<String>>,
}

impl Reply {
    pub fn new(state: AppState, shape: Shape, parser: ReplyParser, logprobs: bool, return_metrics: bool) -> Self {
        Self { state, shape, parser, logprobs, return_metrics, arrived: Instant::now(), first_token: None, calls: 0 }
    }

    /// The whole reply as one `done` body.
    pub async fn whole(mut self, handle: RequestHandle) -> Result<Response, ApiError> {
        let output: GenerationOutput = handle.collect_async().await;
        check_output(&output)?;
        self.first_token = output.first_token_at;
        let parser = std::mem::replace(&mut self.parser, ReplyParser::text_only());
        let pieces = parser.parse_whole(&output.text);
        let ending = Ending {
            reason: output.finish_reason,
            prompt_tokens: output.prompt_token_ids.len(),
            completion_tokens: output.token_ids.len(),
            schema_errors: output.schema_errors.clone(),
        };
        Ok(axum::Json(self.chunk(pieces, &output.tokens, Some(ending))).into_response())
    }

    /// The reply as NDJSON lines, one per decided piece of output.
    pub fn stream(self, handle: RequestHandle) -> Response {
        let lines = futures::stream::unfold(Some((self, handle)), |state| async move {
            let (mut reply, mut handle) = state?;
            loop {
                let Some(event) = StreamExt::next(&mut handle).await else {
                    let error = "the engine stopped before the request finished".to_string();
                    return Some((line(&ErrorBody { error }), None));
                };
                match event {
                    Event::PromptLogprobs(_) => {}
                    Event::Tokens { tokens, text } => {
                        reply.first_token.get_or_insert_with(Instant::now);
                        let pieces = reply.parser.push(&text);
                        let carries = !tokens.is_empty() && (reply.logprobs || reply.return_metrics);
                        if !pieces.is_empty() || carries {
                            let chunk = reply.chunk(pieces, &tokens, None);
                            return Some((line(&chunk), Some((reply, handle))));
                        }
                    }
                    Event::Finished { reason, prompt_tokens, completion_tokens, error, schema_errors, .. } => {
                        if let Err(e) = check_finish(reason, error.as_deref()) {
                            return Some((line(&ErrorBody { error: e.message }), None));
                        }
                        let pieces = reply.parser.finish();
                        let ending = Ending { reason, prompt_tokens, completion_tokens, schema_errors };
                        let chunk = reply.chunk(pieces, &[], Some(ending));
                        return Some((line(&chunk), None));
                    }
                }
            }
        });
        let body = Body::from_stream(lines.map(Ok::<_, Infallible>));
        ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
    }

    fn chunk(&mut self, pieces: Vec<ReplyPiece>, tokens: &[GeneratedToken], mut ending: Option<Ending>) -> Chunk {
        let mut message = OutMessage { role: "assistant", ..OutMessage::default() };
        let mut thinking = String::new();
        let mut calls = Vec::new();
        for piece in pieces {
            match piece {
                ReplyPiece::Thinking(t) => thinking.push_str(&t),
                ReplyPiece::Text(t) => message.content.push_str(&t),
                ReplyPiece::Call { id, name, arguments } => {
                    let arguments = call_arguments(&arguments);
                    calls.push(OutToolCall { id, function: OutFunction { index: self.calls, name, arguments } });
                    self.calls += 1;
                }
            }
        }
        let thinking = (!thinking.is_empty()).then_some(thinking);
        let body = match self.shape {
            Shape::Chat => {
                message.thinking = thinking;
                message.tool_calls = (!calls.is_empty()).then_some(calls);
                ChunkBody::Chat { message }
            }
            Shape::Generate => ChunkBody::Generate { response: message.content, thinking },
        };
        let now = Instant::now();
        let nanos = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let done = ending.is_some();
        let schema_errors = ending.as_mut().and_then(|e| e.schema_errors.take());
        let (done_reason, stats) = match ending {
            None => (None, None),
            Some(e) => {
                let first = self.first_token.unwrap_or(now);
                let stats = Stats {
                    total_duration: nanos(now - self.arrived),
                    load_duration: 0,
                    prompt_eval_count: e.prompt_tokens,
                    prompt_eval_duration: nanos(first.saturating_duration_since(self.arrived)),
                    eval_count: e.completion_tokens,
                    eval_duration: nanos(now.saturating_duration_since(first)),
                };
                (Some(if e.reason == FinishReason::Length { "length" } else { "stop" }), Some(stats))
            }
        };
        Chunk {
            model: self.state.model_id.clone(),
            created_at: created_at(),
            body,
            done,
            done_reason,
            stats,
            logprobs: (self.logprobs && !tokens.is_empty()).then(|| chat_logprobs(&self.state.engine, tokens).content),
            extras: TokenExtras {
                schema_errors,
                ..TokenExtras::new(tokens, self.return_metrics && !tokens.is_empty(), false)
            },
        }
    }
}

/// Ollama's timestamps: RFC 3339 in UTC with nanoseconds.
pub fn created_at() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

fn line<T: serde::Serialize>(body: &T) -> Bytes {
    let mut text = serde_json::to_string(body).unwrap_or_default();
    text.push('\n');
    Bytes::from(text)
}
