//! `POST /v1/chat/completions`, with `<think>` split into `reasoning_content` for chat
//! templates that have a thinking switch.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use crate::{ChatMessage, FinishReason, GeneratedToken, Prompt};
use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::extract::ApiJson;
use super::format::{chat_logprobs, Extras};
use super::params::{parse_common, parse_logprobs, ParsedParams};
use super::protocol::{ChatRequest, ContentField, MessageIn};
use super::reasoning::{ReasoningSplitter, Split};
use super::state::{AppState, DefaultMaxTokens};
use super::stream::{sse_response, usage_json, StreamFormat};

pub async fn chat_completions(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    state.check_model(req.common.model.as_deref())?;
    let (messages, parsed, logprobs) = parse_chat(req)?;
    let (enable_thinking, return_metrics) = (parsed.params.enable_thinking, parsed.params.return_metrics);
    let handle = state
        .submit(Prompt::Chat(messages), parsed.params, parsed.max_tokens, DefaultMaxTokens::RestOfContext)
        .await?;
    let splitter = (state.thinking_template && enable_thinking != Some(false))
        .then(|| ReasoningSplitter::new(prompt_opens_think(&state, &handle.prompt_token_ids)));
    let mut format = ChatFormat {
        state: state.clone(),
        id: format!("chatcmpl-{}", handle.id),
        created: super::state::unix_now(),
        logprobs: logprobs.is_some(),
        extras: Extras { return_metrics, return_token_ids: parsed.return_token_ids },
        splitter,
    };
    if parsed.stream {
        return Ok(sse_response(handle, format, parsed.include_usage));
    }
    let output = handle.collect_async().await;
    if output.finish_reason == FinishReason::Error {
        return Err(ApiError::internal(output.error.unwrap_or_else(|| "generation failed".into())));
    }
    let mut split = format.split(&output.text);
    let rest = format.split_finish();
    split.reasoning.push_str(&rest.reasoning);
    split.content.push_str(&rest.content);
    let mut msg = json!({ "role": "assistant", "content": split.content });
    if format.splitter.is_some() {
        msg["reasoning_content"] = if split.reasoning.is_empty() { Value::Null } else { json!(split.reasoning) };
    }
    let mut choice = Map::new();
    choice.insert("index".into(), json!(0));
    choice.insert("message".into(), msg);
    let lp = if format.logprobs { chat_logprobs(&state.engine, &output.tokens) } else { Value::Null };
    choice.insert("logprobs".into(), lp);
    choice.insert("finish_reason".into(), json!(output.finish_reason.as_str()));
    format.extras.apply(&output.tokens, &mut choice);
    let body = json!({
        "id": format.id,
        "object": "chat.completion",
        "created": format.created,
        "model": state.model_id,
        "choices": [Value::Object(choice)],
        "usage": usage_json(output.prompt_token_ids.len(), output.token_ids.len()),
    });
    Ok(Json(body).into_response())
}

/// Everything a chat body must pass before it reaches the engine: the messages, the parsed
/// parameters (with `enable_thinking`) and the logprobs count.
pub(super) fn parse_chat(mut req: ChatRequest) -> Result<(Vec<ChatMessage>, ParsedParams, Option<usize>), ApiError> {
    let top = parse_logprobs("top_logprobs", req.top_logprobs)?;
    let logprobs = match (req.logprobs.unwrap_or(false), top) {
        (true, top) => Some(top.unwrap_or(0)),
        (false, Some(_)) => {
            return Err(ApiError::invalid_param("top_logprobs", "top_logprobs requires logprobs: true"))
        }
        (false, None) => None,
    };
    let mut parsed = parse_common(&mut req.common, logprobs)?;
    let enable_thinking = req.chat_template_kwargs.as_ref().and_then(|k| k.enable_thinking).or(req.enable_thinking);
    parsed.params.enable_thinking = enable_thinking;
    let messages = req.messages.into_iter().map(message).collect::<Result<Vec<_>, _>>()?;
    if messages.is_empty() {
        return Err(ApiError::invalid_param("messages", "messages must not be empty"));
    }
    Ok((messages, parsed, logprobs))
}

fn message(m: MessageIn) -> Result<ChatMessage, ApiError> {
    let content = match m.content {
        None => String::new(),
        Some(ContentField::Text(t)) => t,
        Some(ContentField::Parts(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (part.kind.as_str(), part.text) {
                    ("text", Some(t)) => text.push_str(&t),
                    (kind, _) => {
                        return Err(ApiError::invalid_param(
                            "messages",
                            format!("content parts of type `{kind}` are not supported (text only)"),
                        ))
                    }
                }
            }
            text
        }
    };
    Ok(ChatMessage { role: m.role, content })
}

/// Templates that put `<think>` at the end of the generation prompt start the output inside
/// the think block.
fn prompt_opens_think(state: &AppState, prompt: &[u32]) -> bool {
    let tail = &prompt[prompt.len().saturating_sub(4)..];
    let text = state.engine.tokenizer().decode(tail, false).unwrap_or_default();
    text.trim_end().ends_with("<think>")
}

struct ChatFormat {
    state: AppState,
    id: String,
    created: u64,
    logprobs: bool,
    extras: Extras,
    splitter: Option<ReasoningSplitter>,
}

impl ChatFormat {
    fn split(&mut self, text: &str) -> Split {
        match &mut self.splitter {
            Some(s) => s.push(text),
            None => Split { reasoning: String::new(), content: text.to_string() },
        }
    }

    fn split_finish(&mut self) -> Split {
        self.splitter.as_mut().map(ReasoningSplitter::finish).unwrap_or_default()
    }

    fn chunk(&self, choices: Vec<Value>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.state.model_id,
            "choices": choices,
        })
    }

    fn delta_chunk(&self, split: Split, tokens: &[GeneratedToken]) -> Option<Value> {
        let mut delta = Map::new();
        if !split.reasoning.is_empty() {
            delta.insert("reasoning_content".into(), json!(split.reasoning));
        }
        if !split.content.is_empty() {
            delta.insert("content".into(), json!(split.content));
        }
        let carries_extras = !tokens.is_empty() && (self.logprobs || self.extras.return_metrics || self.extras.return_token_ids);
        if delta.is_empty() && !carries_extras {
            return None;
        }
        let mut choice = Map::new();
        choice.insert("index".into(), json!(0));
        choice.insert("delta".into(), Value::Object(delta));
        let lp = if self.logprobs { chat_logprobs(&self.state.engine, tokens) } else { Value::Null };
        choice.insert("logprobs".into(), lp);
        choice.insert("finish_reason".into(), Value::Null);
        self.extras.apply(tokens, &mut choice);
        Some(self.chunk(vec![Value::Object(choice)]))
    }
}

impl StreamFormat for ChatFormat {
    fn opening(&mut self) -> Vec<Value> {
        let choice = json!({ "index": 0, "delta": { "role": "assistant", "content": "" }, "logprobs": null, "finish_reason": null });
        vec![self.chunk(vec![choice])]
    }

    fn on_tokens(&mut self, tokens: &[GeneratedToken], text: &str) -> Vec<Value> {
        let split = self.split(text);
        self.delta_chunk(split, tokens).into_iter().collect()
    }

    fn on_finish(&mut self, reason: FinishReason) -> Vec<Value> {
        let rest = self.split_finish();
        let mut chunks: Vec<Value> = self.delta_chunk(rest, &[]).into_iter().collect();
        let choice = json!({ "index": 0, "delta": {}, "logprobs": null, "finish_reason": reason.as_str() });
        chunks.push(self.chunk(vec![choice]));
        chunks
    }

    fn usage_chunk(&self, usage: Value) -> Value {
        let mut chunk = self.chunk(Vec::new());
        chunk["usage"] = usage;
        chunk
    }
}
