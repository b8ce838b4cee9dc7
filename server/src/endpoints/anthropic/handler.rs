//! `POST /v1/messages` (whole or streamed) and `POST /v1/messages/count_tokens`.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use entrobatch::{FinishReason, Prompt};

use super::convert::chat_request;
use super::error::AnthropicError;
use super::protocol::MessagesRequest;
use super::response::{ContentBlock, Message, TokenCount, Usage};
use super::stream::message_stream;
use crate::endpoints::chat::{call_arguments, parse_chat, ParsedChat, ReplyParser, ReplyPiece};
use crate::request::extract::ApiJson;
use crate::response::collect::check_output;
use crate::response::error::ApiError;
use crate::response::TokenExtras;
use crate::state::AppState;

pub async fn messages(
    State(state): State<AppState>,
    body: Result<ApiJson<MessagesRequest>, ApiError>,
) -> Result<Response, AnthropicError> {
    let ApiJson(req) = body?;
    let chat = parse_messages(&state, req)?;
    let handle = state.submit(chat.request()).await?;
    let parser = ReplyParser::new(&state, &chat, &handle);
    let id = state.response_id("msg", handle.id);
    let return_metrics = chat.parsed.params.return_metrics;
    if chat.parsed.stream {
        return Ok(message_stream(state, id, handle, parser, return_metrics));
    }
    let output = handle.collect_async().await;
    check_output(&output)?;
    let pieces = parser.parse_whole(&output.text);
    let called = pieces.iter().any(|p| matches!(p, ReplyPiece::Call { .. }));
    let message = Message {
        id,
        kind: "message",
        role: "assistant",
        model: state.model_id.clone(),
        content: pieces.into_iter().map(block).collect(),
        stop_reason: Some(stop_reason(output.finish_reason, output.stop_string.is_some(), called)),
        stop_sequence: output.stop_string.clone(),
        usage: Usage::new(output.prompt_token_ids.len(), output.cached_tokens, output.token_ids.len()),
        extras: TokenExtras {
            schema_errors: output.schema_errors.clone(),
            ..TokenExtras::new(&output.tokens, return_metrics, false)
        },
    };
    Ok(Json(message).into_response())
}

/// A `/v1/messages` body as the chat request it makes, checked.
pub(crate) fn parse_messages(state: &AppState, req: MessagesRequest) -> Result<ParsedChat, ApiError> {
    state.check_model(Some(&req.model))?;
    let chat = parse_chat(chat_request(req, true)?, state)?;
    chat.check_thinking(state, "thinking")?;
    Ok(chat)
}

pub async fn count_tokens(
    State(state): State<AppState>,
    body: Result<ApiJson<MessagesRequest>, ApiError>,
) -> Result<Json<TokenCount>, AnthropicError> {
    let ApiJson(req) = body?;
    state.check_model(Some(&req.model))?;
    let chat = parse_chat(chat_request(req, false)?, &state)?;
    let engine = state.engine.clone();
    let count = tokio::task::spawn_blocking(move || {
        engine.tokenize_prompt(&Prompt::Chat(chat.messages), &chat.parsed.params).map(|ids| ids.len())
    })
    .await
    .map_err(|e| ApiError::internal(format!("tokenize task failed: {e}")))?
    .map_err(ApiError::from)?;
    Ok(Json(TokenCount { input_tokens: count }))
}

/// Anthropic's `stop_reason` for how the output ended.
pub fn stop_reason(reason: FinishReason, by_stop_sequence: bool, called_tools: bool) -> &'static str {
    match reason {
        FinishReason::Length => "max_tokens",
        _ if called_tools => "tool_use",
        _ if by_stop_sequence => "stop_sequence",
        _ => "end_turn",
    }
}

/// A decided piece of the reply as a content block; a call's arguments are a JSON object
/// (the tool-call parser only yields objects).
pub fn block(piece: ReplyPiece) -> ContentBlock {
    match piece {
        ReplyPiece::Thinking(thinking) => ContentBlock::Thinking { thinking, signature: String::new() },
        ReplyPiece::Text(text) => ContentBlock::Text { text },
        ReplyPiece::Call { id, name, arguments } => {
            ContentBlock::ToolUse { id: tool_use_id(&id), name, input: call_arguments(&arguments) }
        }
    }
}

/// Anthropic's ids for tool uses start `toolu_`.
pub fn tool_use_id(call_id: &str) -> String {
    format!("toolu_{}", call_id.trim_start_matches("call_"))
}
