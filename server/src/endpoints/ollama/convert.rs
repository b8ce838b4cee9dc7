//! Ollama bodies as the chat endpoint's request (or, for a raw `/api/generate`, the shared
//! parameters alone), so they pass the same checks and become the same engine requests an
//! OpenAI client's would. Assistant tool calls get ids, and each `tool` message the id of
//! the call it answers (by `tool_call_id`, else `tool_name`, else order), since Ollama's
//! messages do not always carry them.

use std::collections::VecDeque;

use serde_json::{json, Value};

use super::protocol::{ChatBody, GenerateBody, OllamaMessage, Options};
use crate::endpoints::chat::protocol::{ChatRequest, ContentField, MessageIn};
use crate::request::protocol::{CommonParams, StopField, StructuredFields};
use crate::response::error::ApiError;

/// What an `/api/generate` body asks for.
pub enum Generate {
    /// No prompt: Ollama's way to load a model, answered at once.
    Load,
    /// `raw`: the prompt as text, no chat template.
    Raw { common: Box<CommonParams>, prompt: String, logprobs: Option<bool>, top_logprobs: Option<i64> },
    /// The prompt (and `system`) through the chat template.
    Chat(Box<ChatRequest>),
}

pub fn chat_request(body: ChatBody) -> Result<ChatRequest, ApiError> {
    let common = common(body.model, body.options, body.format, body.stream)?;
    let mut messages = Vec::with_capacity(body.messages.len());
    let mut pending: VecDeque<(String, String)> = VecDeque::new();
    for (i, m) in body.messages.into_iter().enumerate() {
        messages.push(message(i, m, &mut pending)?);
    }
    Ok(ChatRequest {
        messages,
        logprobs: body.logprobs,
        top_logprobs: body.top_logprobs,
        enable_thinking: think(body.think)?,
        tools: body.tools,
        ..ChatRequest::new(common, Vec::new())
    })
}

pub fn generate_request(body: GenerateBody) -> Result<Generate, ApiError> {
    let refused = [
        ("suffix", body.suffix.is_some(), "fill-in-the-middle is not supported: send the prompt alone"),
        (
            "template",
            body.template.is_some(),
            "the model's own chat template is always used; send `raw: true` with a prompt you rendered",
        ),
        ("context", body.context.is_some(), "`context` is deprecated in Ollama; send the conversation to /api/chat"),
        ("images", body.images.as_ref().is_some_and(|i| !i.is_empty()), "this server reads text only"),
    ];
    if let Some((field, _, why)) = refused.into_iter().find(|(_, sent, _)| *sent) {
        return Err(ApiError::invalid_param(field, format!("`{field}` is not supported: {why}")));
    }
    let Some(prompt) = body.prompt.filter(|p| !p.is_empty()) else {
        return Ok(Generate::Load);
    };
    let raw = body.raw.unwrap_or(false);
    let common = common(body.model, body.options, body.format, body.stream)?;
    if raw {
        if body.system.is_some() || body.think.is_some() {
            return Err(ApiError::invalid_param(
                "raw",
                "a raw prompt takes no `system` or `think`: render them into it",
            ));
        }
        return Ok(Generate::Raw {
            common: Box::new(common),
            prompt,
            logprobs: body.logprobs,
            top_logprobs: body.top_logprobs,
        });
    }
    let mut messages = Vec::new();
    if let Some(system) = body.system {
        messages.push(plain("system", system));
    }
    messages.push(plain("user", prompt));
    Ok(Generate::Chat(Box::new(ChatRequest {
        messages,
        logprobs: body.logprobs,
        top_logprobs: body.top_logprobs,
        enable_thinking: think(body.think)?,
        ..ChatRequest::new(common, Vec::new())
    })))
}

/// `options`, `format` and `stream` as the shared request fields.
fn common(
    model: String,
    options: Option<Options>,
    format: Option<Value>,
    stream: Option<bool>,
) -> Result<CommonParams, ApiError> {
    let o = options.unwrap_or_default();
    let neutral = [
        ("typical_p", o.typical_p.is_some_and(|v| v != 1.0)),
        ("tfs_z", o.tfs_z.is_some_and(|v| v != 1.0)),
        ("mirostat", o.mirostat.is_some_and(|v| v != 0)),
        ("mirostat_tau", o.mirostat_tau.is_some() && o.mirostat.is_some_and(|v| v != 0)),
        ("mirostat_eta", o.mirostat_eta.is_some() && o.mirostat.is_some_and(|v| v != 0)),
        // The penalties here count every token of the sequence, as vLLM's do (-1 in Ollama).
        ("repeat_last_n", o.repeat_last_n.is_some_and(|v| v != -1) && o.repeat_penalty.is_some_and(|p| p != 1.0)),
        ("penalize_newline", o.penalize_newline == Some(false) && o.repeat_penalty.is_some_and(|p| p != 1.0)),
        ("num_keep", o.num_keep.is_some_and(|v| v > 0)),
    ];
    if let Some((name, _)) = neutral.into_iter().find(|(_, set)| *set) {
        return Err(ApiError::invalid_param(
            format!("options.{name}"),
            format!("`options.{name}` is not supported at that value: this server has no such sampler; leave it out"),
        ));
    }
    let max_tokens = match o.num_predict {
        None | Some(-1) | Some(-2) => None,
        Some(n) if n < 0 => {
            return Err(ApiError::invalid_param(
                "options.num_predict",
                format!("num_predict must be -1, -2 or >= 0, got {n}"),
            ))
        }
        Some(n) => Some(n),
    };
    Ok(CommonParams {
        model: Some(model),
        max_tokens,
        temperature: o.temperature,
        top_p: o.top_p,
        top_k: o.top_k,
        min_p: o.min_p,
        seed: o.seed,
        stop: o.stop.map(StopField::Many),
        repetition_penalty: o.repeat_penalty,
        presence_penalty: o.presence_penalty,
        frequency_penalty: o.frequency_penalty,
        stream: Some(stream.unwrap_or(true)),
        decoding: o.decoding,
        return_metrics: o.return_metrics,
        structured: StructuredFields { response_format: response_format(format)?, ..StructuredFields::default() },
        ..CommonParams::default()
    })
}

/// `format`: `"json"` for any JSON value Ollama-style (an object here, as OpenAI's
/// `json_object`), or a JSON schema.
fn response_format(format: Option<Value>) -> Result<Option<Value>, ApiError> {
    match format {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s == "json" => Ok(Some(json!({"type": "json_object"}))),
        Some(schema @ Value::Object(_)) => {
            Ok(Some(json!({"type": "json_schema", "json_schema": {"name": "format", "schema": schema}})))
        }
        Some(other) => {
            Err(ApiError::invalid_param("format", format!("format must be \"json\" or a JSON schema, got {other}")))
        }
    }
}

/// `think`: a boolean; Ollama's levels (`"low"`, ...) belong to models with a reasoning effort.
fn think(value: Option<Value>) -> Result<Option<bool>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(b)),
        Some(other) => Err(ApiError::invalid_param(
            "think",
            format!("think must be true or false here (no model served has effort levels), got {other}"),
        )),
    }
}

fn message(index: usize, m: OllamaMessage, pending: &mut VecDeque<(String, String)>) -> Result<MessageIn, ApiError> {
    if m.images.as_ref().is_some_and(|i| !i.is_empty()) {
        return Err(ApiError::invalid_param(format!("messages[{index}].images"), "this server reads text only"));
    }
    let mut out = plain(&m.role, m.content.unwrap_or_default());
    if let Some(thinking) = m.thinking {
        out.extra.insert("thinking".into(), Value::String(thinking));
    }
    if let Some(calls) = m.tool_calls.filter(|c| !c.is_empty()) {
        pending.clear();
        let mut list = Vec::with_capacity(calls.len());
        for (j, call) in calls.into_iter().enumerate() {
            let id = call.id.unwrap_or_else(|| format!("call_{index}_{j}"));
            let arguments = match call.function.arguments {
                Value::String(s) => s,
                other => other.to_string(),
            };
            pending.push_back((id.clone(), call.function.name.clone()));
            list.push(
                json!({"id": id, "type": "function", "function": {"name": call.function.name, "arguments": arguments}}),
            );
        }
        out.tool_calls = Some(list);
    } else if m.role != "tool" {
        pending.clear();
    }
    if m.role == "tool" {
        let by_name = m.tool_name.as_ref().and_then(|name| pending.iter().position(|(_, n)| n == name));
        let answered = match (m.tool_call_id, by_name) {
            (Some(id), _) => {
                pending.retain(|(p, _)| *p != id);
                Some(id)
            }
            (None, Some(k)) => pending.remove(k).map(|(id, _)| id),
            (None, None) => pending.pop_front().map(|(id, _)| id),
        };
        let Some(id) = answered else {
            return Err(ApiError::invalid_param(
                format!("messages[{index}]"),
                format!("messages[{index}] is a tool message with no assistant tool call left for it to answer"),
            ));
        };
        out.tool_call_id = Some(id);
        out.name = m.tool_name;
    }
    Ok(out)
}

fn plain(role: &str, content: String) -> MessageIn {
    MessageIn::new(role, ContentField::Text(content))
}
