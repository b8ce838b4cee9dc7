//! The conversation as the chat template sees it: each OpenAI message checked (role, content
//! parts, tool fields) and converted to a `ChatMessage`, and the rule that a `tool` message
//! answers a call. `/tokenize` renders messages through the same conversion.

use serde_json::Value;

use super::protocol::{ContentField, MessageIn};
use crate::response::error::ApiError;
use entrobatch::ChatMessage;

/// The roles a conversation may use; `developer` is OpenAI's newer name for `system`.
const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

/// One OpenAI message as the chat template sees it; unknown roles and malformed tool fields
/// are refused with the message's position.
pub fn chat_message(index: usize, m: MessageIn) -> Result<ChatMessage, ApiError> {
    let at = |what: &str| format!("messages[{index}]{what}");
    if !ROLES.contains(&m.role.as_str()) {
        return Err(ApiError::invalid_param(
            at(".role"),
            format!("messages[{index}]: unknown role `{}` (one of {})", m.role, ROLES.join(", ")),
        ));
    }
    let content = match m.content {
        None => String::new(),
        Some(ContentField::Text(t)) => t,
        Some(ContentField::Parts(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.into_iter().enumerate() {
                if part.kind == "text" {
                    if let Some(key) = part.other.keys().next() {
                        return Err(ApiError::invalid_param(
                            at(&format!(".content[{j}].{key}")),
                            format!("unknown key `{key}` in a text part (it has `type` and `text`)"),
                        ));
                    }
                }
                match (part.kind.as_str(), part.text) {
                    ("text", Some(t)) => text.push_str(&t),
                    (kind, _) => {
                        return Err(ApiError::invalid_param(
                            at(".content"),
                            format!("content parts of type `{kind}` are not supported (text only)"),
                        ))
                    }
                }
            }
            text
        }
    };
    let role = if m.role == "developer" { "system".to_string() } else { m.role };
    let mut message = ChatMessage::new(role, content);
    message.extra = m.extra;
    if let Some(calls) = m.tool_calls.filter(|c| !c.is_empty()) {
        if message.role != "assistant" {
            return Err(ApiError::invalid_param(at(".tool_calls"), "only assistant messages carry tool_calls"));
        }
        for (i, call) in calls.iter().enumerate() {
            let named = call.pointer("/function/name").is_some_and(Value::is_string);
            let args = call.pointer("/function/arguments").is_some_and(|a| a.is_string() || a.is_object());
            if !(named && args) {
                return Err(ApiError::invalid_param(
                    at(&format!(".tool_calls[{i}]")),
                    "a tool call needs `function.name` and `function.arguments` (a JSON string)",
                ));
            }
        }
        message = message.with_tool_calls(calls);
    }
    if message.role == "tool" {
        let Some(id) = m.tool_call_id else {
            return Err(ApiError::invalid_param(at(".tool_call_id"), "a tool message must name the call it answers"));
        };
        message.tool_call_id = Some(id);
    }
    message.name = m.name;
    Ok(message)
}

/// A `tool` message answers a call: it must follow an assistant message with `tool_calls`
/// (or another tool message). Anything else is refused with its position rather than
/// rendered into a prompt the model was never trained on.
pub fn check_tool_order(messages: &[ChatMessage]) -> Result<(), ApiError> {
    for (i, _) in messages.iter().enumerate().filter(|(_, m)| m.role == "tool") {
        let answers_a_call = messages[..i]
            .iter()
            .rev()
            .find(|p| p.role != "tool")
            .is_some_and(|p| p.role == "assistant" && p.tool_calls.as_ref().is_some_and(|c| !c.is_empty()));
        if !answers_a_call {
            return Err(ApiError::invalid_param(
                format!("messages[{i}]"),
                format!("messages[{i}] is a tool message with no assistant tool call before it"),
            ));
        }
    }
    Ok(())
}
