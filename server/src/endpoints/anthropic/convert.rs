//! An Anthropic Messages request as the chat endpoint's request, so it goes through the same
//! checks (`parse_chat`) and becomes the same engine request an OpenAI client's would:
//! `system` first, `tool_result` blocks as `tool` messages answering their `tool_use`,
//! `tool_use` blocks as an assistant's `tool_calls`, `tools` and `tool_choice` in OpenAI's
//! shapes.

use serde_json::{json, Value};

use super::protocol::{
    Block, MessageParam, MessagesRequest, OutputFormat, SystemField, ThinkingParam, ToolChoiceParam,
};
use crate::endpoints::chat::protocol::{ChatRequest, ContentField, ContentPart, MessageIn};
use crate::request::protocol::{CommonParams, StopField, StructuredFields};
use crate::response::error::ApiError;

/// The chat request for `req`. `generate`: the body is for `/v1/messages` (which needs
/// `max_tokens`) rather than `count_tokens`.
pub fn chat_request(req: MessagesRequest, generate: bool) -> Result<ChatRequest, ApiError> {
    let max_tokens = match req.max_tokens {
        None if generate => return Err(ApiError::invalid_param("max_tokens", "max_tokens: Field required")),
        Some(n) if n < 1 => {
            return Err(ApiError::invalid_param("max_tokens", format!("max_tokens must be at least 1, got {n}")))
        }
        n => n,
    };
    let enable_thinking = match req.thinking {
        None => None,
        Some(ThinkingParam::Disabled {}) => Some(false),
        Some(ThinkingParam::Adaptive {}) => Some(true),
        Some(ThinkingParam::Enabled { budget_tokens }) => {
            if max_tokens.is_some_and(|m| budget_tokens >= m) || budget_tokens < 1 {
                return Err(ApiError::invalid_param(
                    "thinking.budget_tokens",
                    "thinking.budget_tokens must be at least 1 and less than max_tokens",
                ));
            }
            Some(true)
        }
    };
    let response_format = req.output_config.and_then(|c| c.format).map(|OutputFormat::JsonSchema { schema }| {
        json!({"type": "json_schema", "json_schema": {"name": "output", "schema": schema}})
    });
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    if let Some(system) = req.system {
        let content = match system {
            SystemField::Text(text) => ContentField::Text(text),
            SystemField::Blocks(blocks) => ContentField::Parts(blocks.into_iter().map(|b| text_part(b.text)).collect()),
        };
        messages.push(MessageIn::new("system", content));
    }
    for (i, m) in req.messages.into_iter().enumerate() {
        convert_message(i, m, &mut messages)?;
    }
    let tools = match req.tools {
        Some(list) => {
            let tools = list
                .into_iter()
                .enumerate()
                .map(|(i, t)| {
                    if t.kind.as_deref().is_some_and(|k| k != "custom") {
                        return Err(ApiError::invalid_param(
                            format!("tools[{i}].type"),
                            "only client tools (`custom`) are supported: server tools run on Anthropic's side",
                        ));
                    }
                    // OpenAI's key order: templates print the tools with `tojson`, order kept.
                    let mut function = match t.description {
                        Some(d) => json!({"name": t.name, "description": d, "parameters": t.input_schema}),
                        None => json!({"name": t.name, "parameters": t.input_schema}),
                    };
                    if let Some(strict) = t.strict {
                        function["strict"] = json!(strict);
                    }
                    Ok(json!({"type": "function", "function": function}))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Some(Value::Array(tools))
        }
        None => None,
    };
    let (tool_choice, parallel) = match req.tool_choice {
        Some(choice) => {
            let (choice, parallel_off) = tool_choice(choice)?;
            (Some(choice), parallel_off.map(|off| !off))
        }
        None => (None, None),
    };
    let common = CommonParams {
        model: Some(req.model),
        max_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        stop: req.stop_sequences.map(StopField::Many),
        stream: req.stream,
        decoding: req.decoding,
        return_metrics: req.return_metrics,
        ttft_target_ms: req.ttft_target_ms,
        speculative: req.speculative,
        structured: StructuredFields { response_format, ..StructuredFields::default() },
        ..CommonParams::default()
    };
    Ok(ChatRequest {
        enable_thinking,
        tools,
        tool_choice,
        parallel_tool_calls: parallel,
        ..ChatRequest::new(common, messages)
    })
}

/// One Anthropic message as chat messages: a user message's `tool_result` blocks become
/// `tool` messages (ahead of its text, as Anthropic requires them first), an assistant's
/// `tool_use` blocks its `tool_calls`.
fn convert_message(index: usize, m: MessageParam, out: &mut Vec<MessageIn>) -> Result<(), ApiError> {
    let at = |what: String| format!("messages[{index}]{what}");
    if m.role != "user" && m.role != "assistant" {
        return Err(ApiError::invalid_param(
            at(".role".into()),
            format!(
                "messages[{index}]: unknown role `{}` (user or assistant; the system prompt goes in `system`)",
                m.role
            ),
        ));
    }
    let blocks = match m.content {
        Value::String(text) => {
            out.push(MessageIn::new(&m.role, ContentField::Text(text)));
            return Ok(());
        }
        Value::Array(blocks) => blocks,
        _ => {
            return Err(ApiError::invalid_param(at(".content".into()), "content must be a string or a list of blocks"))
        }
    };
    let mut text = Vec::new();
    let mut calls = Vec::new();
    for (j, raw) in blocks.into_iter().enumerate() {
        let path = at(format!(".content[{j}]"));
        if let Some(kind @ ("image" | "document" | "search_result" | "container_upload")) =
            raw.get("type").and_then(Value::as_str)
        {
            return Err(ApiError::invalid_param(
                path,
                format!("content blocks of type `{kind}` are not supported: this server reads text only"),
            ));
        }
        let block: Block =
            serde_json::from_value(raw).map_err(|e| ApiError::invalid_param(path.clone(), format!("{path}: {e}")))?;
        match (m.role.as_str(), block) {
            (_, Block::Text { text: t, .. }) => text.push(text_part(t)),
            ("assistant", Block::ToolUse { id, name, input, .. }) => {
                if !input.is_object() {
                    return Err(ApiError::invalid_param(path, "a tool_use block's `input` must be an object"));
                }
                calls.push(
                    json!({"id": id, "type": "function", "function": {"name": name, "arguments": input.to_string()}}),
                );
            }
            ("user", Block::ToolResult { tool_use_id, content, is_error, .. }) => {
                let mut tool = MessageIn::new("tool", ContentField::Text(tool_result_text(&path, content)?));
                tool.tool_call_id = Some(tool_use_id);
                // The chat template sees it as it sees any extra key of a message.
                if let Some(is_error) = is_error {
                    tool.extra.insert("is_error".into(), Value::Bool(is_error));
                }
                out.push(tool);
            }
            ("assistant", Block::Thinking { .. } | Block::RedactedThinking { .. }) => {}
            (role, other) => {
                return Err(ApiError::invalid_param(
                    path,
                    format!("a {role} message cannot carry a {} block", block_name(&other)),
                ))
            }
        }
    }
    if !text.is_empty() || !calls.is_empty() || m.role == "assistant" {
        let mut msg = MessageIn::new(&m.role, ContentField::Parts(text));
        msg.tool_calls = (!calls.is_empty()).then_some(calls);
        out.push(msg);
    }
    Ok(())
}

/// `tool_result.content`: a string or a list of text blocks.
fn tool_result_text(path: &str, content: Option<Value>) -> Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s),
        Some(Value::Array(blocks)) => {
            let mut text = String::new();
            for (k, b) in blocks.into_iter().enumerate() {
                match serde_json::from_value::<Block>(b) {
                    Ok(Block::Text { text: t, .. }) => text.push_str(&t),
                    _ => {
                        return Err(ApiError::invalid_param(
                            format!("{path}.content[{k}]"),
                            "a tool_result's content blocks must be text blocks",
                        ))
                    }
                }
            }
            Ok(text)
        }
        Some(_) => Err(ApiError::invalid_param(format!("{path}.content"), "must be a string or a list of text blocks")),
    }
}

/// Anthropic's `tool_choice` as OpenAI's, and whether it turns parallel calls off.
fn tool_choice(choice: ToolChoiceParam) -> Result<(Value, Option<bool>), ApiError> {
    let value = match (choice.kind.as_str(), choice.name) {
        ("auto", None) => json!("auto"),
        ("any", None) => json!("required"),
        ("none", None) => json!("none"),
        ("tool", Some(name)) => json!({"type": "function", "function": {"name": name}}),
        ("tool", None) => return Err(ApiError::invalid_param("tool_choice.name", "tool_choice `tool` needs a `name`")),
        (kind @ ("auto" | "any" | "none"), Some(_)) => {
            return Err(ApiError::invalid_param("tool_choice.name", format!("tool_choice `{kind}` takes no `name`")))
        }
        (other, _) => {
            return Err(ApiError::invalid_param(
                "tool_choice.type",
                format!("unknown tool_choice type `{other}` (auto, any, tool or none)"),
            ))
        }
    };
    Ok((value, choice.disable_parallel_tool_use))
}

fn block_name(block: &Block) -> &'static str {
    match block {
        Block::Text { .. } => "text",
        Block::ToolUse { .. } => "tool_use",
        Block::ToolResult { .. } => "tool_result",
        Block::Thinking { .. } => "thinking",
        Block::RedactedThinking { .. } => "redacted_thinking",
    }
}

fn text_part(text: String) -> ContentPart {
    ContentPart { kind: "text".into(), text: Some(text), other: serde_json::Map::new() }
}
