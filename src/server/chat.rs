//! `POST /v1/chat/completions`, with `<think>` split into `reasoning_content` for chat
//! templates that have a thinking switch.

use crate::{ChatMessage, FinishReason, GeneratedToken, Prompt};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::chat_tools::{chat_message, check_tool_order, delta_json, parse_tools, tool_calls_json, ToolUse};
use super::defaults::GenerationDefaults;
use super::error::ApiError;
use super::extract::ApiJson;
use super::format::{chat_logprobs, Extras};
use super::params::{engine_request, parse_common, parse_logprobs, refuse_unknown, ParsedParams};
use super::protocol::ChatRequest;
use super::reasoning::{ReasoningSplitter, Split};
use super::state::AppState;
use super::stream::{sse_response, usage_json, StreamFormat};
use super::tool_calls::ToolCallStream;

pub async fn chat_completions(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    state.check_model(req.common.model.as_deref())?;
    let ParsedChat { messages, parsed, logprobs, tools } = parse_chat(req, &state.generation_defaults)?;
    let (enable_thinking, return_metrics) = (parsed.params.enable_thinking, parsed.params.return_metrics);
    let request = engine_request(Prompt::Chat(messages), parsed.params, parsed.max_tokens, None);
    let handle = state.submit(request).await?;
    let splitter = (state.thinking_template && enable_thinking != Some(false))
        .then(|| ReasoningSplitter::new(prompt_opens_think(&state, &handle.prompt_token_ids)));
    let mut format = ChatFormat {
        state: state.clone(),
        id: state.response_id("chatcmpl", handle.id),
        created: super::state::unix_now(),
        logprobs: logprobs.is_some(),
        extras: Extras { return_metrics, return_token_ids: parsed.return_token_ids },
        splitter,
        tool_stream: tools.as_ref().map(ToolUse::stream),
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
    let mut finish_reason = output.finish_reason.as_str();
    let mut msg = json!({ "role": "assistant", "content": split.content });
    if let Some(calls) = tools.map(|t| t.parse(&split.content)).filter(|p| !p.calls.is_empty()) {
        msg["content"] = calls.content.as_deref().map_or(Value::Null, |c| json!(c));
        msg["tool_calls"] = tool_calls_json(&calls);
        if output.finish_reason == FinishReason::Stop {
            finish_reason = "tool_calls";
        }
    }
    if format.splitter.is_some() {
        msg["reasoning_content"] = if split.reasoning.is_empty() { Value::Null } else { json!(split.reasoning) };
    }
    let mut choice = Map::new();
    choice.insert("index".into(), json!(0));
    choice.insert("message".into(), msg);
    let lp = if format.logprobs { chat_logprobs(&state.engine, &output.tokens) } else { Value::Null };
    choice.insert("logprobs".into(), lp);
    choice.insert("finish_reason".into(), json!(finish_reason));
    format.extras.apply(&output.tokens, &mut choice);
    let body = json!({
        "id": format.id,
        "object": "chat.completion",
        "created": format.created,
        "model": state.model_id,
        "system_fingerprint": state.fingerprint,
        "choices": [Value::Object(choice)],
        "usage": usage_json(output.prompt_token_ids.len(), output.cached_tokens, output.token_ids.len()),
    });
    Ok(Json(body).into_response())
}

/// A chat body that passed every check before the engine.
pub(super) struct ParsedChat {
    pub messages: Vec<ChatMessage>,
    pub parsed: ParsedParams,
    pub logprobs: Option<usize>,
    /// The parser for tool calls, when the request lets the model call tools.
    pub tools: Option<ToolUse>,
}

/// Everything a chat body must pass before it reaches the engine: the messages, the parsed
/// parameters (with `enable_thinking`, tools and any structured output) and the logprobs count.
pub(super) fn parse_chat(mut req: ChatRequest, defaults: &GenerationDefaults) -> Result<ParsedChat, ApiError> {
    refuse_unknown(&req.unknown)?;
    let top = parse_logprobs("top_logprobs", req.top_logprobs)?;
    let logprobs = match (req.logprobs.unwrap_or(false), top) {
        (true, top) => Some(top.unwrap_or(0)),
        (false, Some(_)) => {
            return Err(ApiError::invalid_param("top_logprobs", "top_logprobs requires logprobs: true"))
        }
        (false, None) => None,
    };
    let mut parsed = parse_common(&mut req.common, logprobs, defaults)?;
    let enable_thinking = req.chat_template_kwargs.as_ref().and_then(|k| k.enable_thinking).or(req.enable_thinking);
    parsed.params.enable_thinking = enable_thinking;
    let tools = parse_tools(req.tools, req.tool_choice, req.parallel_tool_calls, &mut parsed.params)?;
    let continue_final = req.continue_final_message.unwrap_or(false);
    if continue_final && req.add_generation_prompt == Some(true) {
        return Err(ApiError::invalid_param(
            "continue_final_message",
            "continue_final_message and add_generation_prompt: true are mutually exclusive",
        ));
    }
    parsed.params.continue_final_message = continue_final;
    parsed.params.add_generation_prompt = req.add_generation_prompt.unwrap_or(!continue_final);
    let messages =
        req.messages.into_iter().enumerate().map(|(i, m)| chat_message(i, m)).collect::<Result<Vec<_>, _>>()?;
    if messages.is_empty() {
        return Err(ApiError::invalid_param("messages", "messages must not be empty"));
    }
    check_tool_order(&messages)?;
    Ok(ParsedChat { messages, parsed, logprobs, tools })
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
    /// Finds tool calls in the content as it streams; `None` when no call can come back.
    tool_stream: Option<ToolCallStream>,
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
            "system_fingerprint": self.state.fingerprint,
            "choices": choices,
        })
    }

    /// The chunks for this much output: reasoning, then content (or, with tools, the content
    /// and calls the tool parser has decided on), with the tokens' logprobs and extras on the
    /// last one.
    fn delta_chunks(&mut self, split: Split, tokens: &[GeneratedToken], finished: bool) -> Vec<Value> {
        let mut deltas: Vec<Value> = Vec::new();
        if !split.reasoning.is_empty() {
            deltas.push(json!({ "reasoning_content": split.reasoning }));
        }
        match &mut self.tool_stream {
            Some(stream) => {
                let mut decided = stream.push(&split.content);
                if finished {
                    decided.extend(stream.finish());
                }
                deltas.extend(decided.into_iter().flat_map(delta_json));
            }
            None if !split.content.is_empty() => deltas.push(json!({ "content": split.content })),
            None => {}
        }
        let carries_extras =
            !tokens.is_empty() && (self.logprobs || self.extras.return_metrics || self.extras.return_token_ids);
        if deltas.is_empty() && carries_extras {
            deltas.push(json!({}));
        }
        let last = deltas.len().saturating_sub(1);
        let mut chunks = Vec::with_capacity(deltas.len());
        for (i, delta) in deltas.into_iter().enumerate() {
            let mut choice = Map::new();
            choice.insert("index".into(), json!(0));
            choice.insert("delta".into(), delta);
            let lp = if self.logprobs && i == last { chat_logprobs(&self.state.engine, tokens) } else { Value::Null };
            choice.insert("logprobs".into(), lp);
            choice.insert("finish_reason".into(), Value::Null);
            if i == last {
                self.extras.apply(tokens, &mut choice);
            }
            chunks.push(self.chunk(vec![Value::Object(choice)]));
        }
        chunks
    }
}

impl StreamFormat for ChatFormat {
    fn opening(&mut self) -> Vec<Value> {
        let choice = json!({ "index": 0, "delta": { "role": "assistant", "content": "" }, "logprobs": null, "finish_reason": null });
        vec![self.chunk(vec![choice])]
    }

    fn on_tokens(&mut self, tokens: &[GeneratedToken], text: &str) -> Vec<Value> {
        let split = self.split(text);
        self.delta_chunks(split, tokens, false)
    }

    fn on_finish(&mut self, reason: FinishReason) -> Vec<Value> {
        let rest = self.split_finish();
        let mut chunks = self.delta_chunks(rest, &[], true);
        let called = self.tool_stream.as_ref().is_some_and(|s| s.calls_sent() > 0);
        let label = if called && reason == FinishReason::Stop { "tool_calls" } else { reason.as_str() };
        let choice = json!({ "index": 0, "delta": {}, "logprobs": null, "finish_reason": label });
        chunks.push(self.chunk(vec![choice]));
        chunks
    }

    fn usage_chunk(&self, usage: Value) -> Value {
        let mut chunk = self.chunk(Vec::new());
        chunk["usage"] = usage;
        chunk
    }
}
