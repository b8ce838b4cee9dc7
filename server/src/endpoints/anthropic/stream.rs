//! A streamed message as Anthropic sends it: `message_start`, a `ping`, then each content
//! block opened, filled by deltas and closed (text, thinking, one `tool_use` block per call
//! with its input as one `input_json_delta`), then `message_delta` with the stop reason and
//! usage, and `message_stop`. A failure midway is an `error` event. The stream owns the
//! request's handle: a client that hangs up aborts the request.

use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use entrobatch::{Event, GeneratedToken, RequestHandle};
use futures::StreamExt;

use super::error::detail;
use super::handler::{stop_reason, tool_use_id};
use super::response::{BlockDelta, ContentBlock, Message, MessageDeltaBody, StreamEvent, Usage};
use crate::endpoints::chat::{ReplyParser, ReplyPiece};
use crate::response::collect::check_finish;
use crate::response::error::ApiError;
use crate::response::TokenExtras;
use crate::state::AppState;

#[derive(Clone, Copy, PartialEq, Eq)]
enum OpenBlock {
    Text,
    Thinking,
}

struct MessageStream {
    handle: RequestHandle,
    parser: ReplyParser,
    /// The block being filled and its index.
    open: Option<(usize, OpenBlock)>,
    next_index: usize,
    /// Every token so far, kept only for `token_metrics`.
    tokens: Option<Vec<GeneratedToken>>,
    started: Option<Message>,
    done: bool,
}

pub fn message_stream(
    state: AppState,
    id: String,
    handle: RequestHandle,
    parser: ReplyParser,
    return_metrics: bool,
) -> Response {
    let start = Message {
        id,
        kind: "message",
        role: "assistant",
        model: state.model_id.clone(),
        content: Vec::new(),
        stop_reason: None,
        stop_sequence: None,
        usage: Usage::new(handle.prompt_token_ids.len(), 0, 0),
        extras: TokenExtras::default(),
    };
    let stream = MessageStream {
        handle,
        parser,
        open: None,
        next_index: 0,
        tokens: return_metrics.then(Vec::new),
        started: Some(start),
        done: false,
    };
    let events = futures::stream::unfold(stream, |mut s| async move {
        if s.done {
            return None;
        }
        let events = s.next_events().await;
        Some((events, s))
    })
    .flat_map(|events| {
        futures::stream::iter(events.into_iter().map(|e| {
            let data = serde_json::to_string(&e).unwrap_or_default();
            Ok::<_, Infallible>(SseEvent::default().event(e.name()).data(data))
        }))
    });
    Sse::new(events).into_response()
}

impl MessageStream {
    async fn next_events(&mut self) -> Vec<StreamEvent> {
        if let Some(message) = self.started.take() {
            return vec![StreamEvent::MessageStart { message }, StreamEvent::Ping];
        }
        loop {
            let Some(event) = StreamExt::next(&mut self.handle).await else {
                self.done = true;
                let error = ApiError::unavailable("the engine stopped before the request finished");
                return vec![StreamEvent::Error { error: detail(&error) }];
            };
            match event {
                Event::PromptLogprobs(_) => {}
                Event::Tokens { tokens, text } => {
                    if let Some(kept) = &mut self.tokens {
                        kept.extend(tokens);
                    }
                    let pieces = self.parser.push(&text);
                    if !pieces.is_empty() {
                        return self.piece_events(pieces);
                    }
                }
                Event::Finished {
                    reason,
                    prompt_tokens,
                    cached_tokens,
                    completion_tokens,
                    error,
                    stop_string,
                    schema_errors,
                    ..
                } => {
                    self.done = true;
                    if let Err(error) = check_finish(reason, error.as_deref()) {
                        return vec![StreamEvent::Error { error: detail(&error) }];
                    }
                    let rest = self.parser.finish();
                    let mut events = self.piece_events(rest);
                    events.extend(self.close());
                    let called = self.parser.calls_sent() > 0;
                    let extras = TokenExtras {
                        schema_errors,
                        ..TokenExtras::new(self.tokens.as_deref().unwrap_or(&[]), self.tokens.is_some(), false)
                    };
                    events.push(StreamEvent::MessageDelta {
                        delta: MessageDeltaBody {
                            stop_reason: stop_reason(reason, stop_string.is_some(), called),
                            stop_sequence: stop_string,
                        },
                        usage: Usage::new(prompt_tokens, cached_tokens, completion_tokens),
                        extras,
                    });
                    events.push(StreamEvent::MessageStop);
                    return events;
                }
            }
        }
    }

    fn piece_events(&mut self, pieces: Vec<ReplyPiece>) -> Vec<StreamEvent> {
        let mut events = Vec::new();
        for piece in pieces {
            match piece {
                ReplyPiece::Thinking(thinking) => {
                    let index = self.ensure_open(OpenBlock::Thinking, &mut events);
                    events.push(StreamEvent::ContentBlockDelta { index, delta: BlockDelta::Thinking { thinking } });
                }
                ReplyPiece::Text(text) => {
                    let index = self.ensure_open(OpenBlock::Text, &mut events);
                    events.push(StreamEvent::ContentBlockDelta { index, delta: BlockDelta::Text { text } });
                }
                ReplyPiece::Call { id, name, arguments } => {
                    events.extend(self.close());
                    let index = self.next_index;
                    self.next_index += 1;
                    let input = serde_json::Value::Object(serde_json::Map::new());
                    let content_block = ContentBlock::ToolUse { id: tool_use_id(&id), name, input };
                    events.push(StreamEvent::ContentBlockStart { index, content_block });
                    let delta = BlockDelta::InputJson { partial_json: arguments };
                    events.push(StreamEvent::ContentBlockDelta { index, delta });
                    events.push(StreamEvent::ContentBlockStop { index });
                }
            }
        }
        events
    }

    /// The index of an open block of `kind`, opening one (and closing another) if needed.
    fn ensure_open(&mut self, kind: OpenBlock, events: &mut Vec<StreamEvent>) -> usize {
        if let Some((index, open)) = self.open {
            if open == kind {
                return index;
            }
        }
        events.extend(self.close());
        let index = self.next_index;
        self.next_index += 1;
        self.open = Some((index, kind));
        let content_block = match kind {
            OpenBlock::Text => ContentBlock::Text { text: String::new() },
            OpenBlock::Thinking => ContentBlock::Thinking { thinking: String::new(), signature: String::new() },
        };
        events.push(StreamEvent::ContentBlockStart { index, content_block });
        index
    }

    fn close(&mut self) -> Option<StreamEvent> {
        self.open.take().map(|(index, _)| StreamEvent::ContentBlockStop { index })
    }
}
