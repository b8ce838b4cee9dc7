//! Tool calling for chat templates that cannot render tools (SmolLM2's, Gemma 3's): what
//! llama-server calls its generic format. The tools are described in a system message, the
//! model is asked to answer either with a bare JSON call (`{"name": ..., "arguments": {...}}`,
//! or a list of them) or in plain text, and decoding is constrained so that an answer opening
//! with `{` or `[` is a valid call of a declared tool. The answer is read by
//! [`JsonFormat`](super::JsonFormat), as a `tool_choice: required` answer is. Earlier tool
//! turns are rewritten into text the template can render: an assistant's calls as the same
//! JSON, a tool's result as a user turn holding `{"tool_result": {"name", "content"}}`.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::{call_schema, ToolChoice, ToolSpec};
use entrobatch::ChatMessage;

/// The system message's text for `tools`.
pub fn system_prompt(tools: &[ToolSpec], parallel: bool) -> String {
    let listed: Vec<Value> = tools
        .iter()
        .map(|t| {
            let mut tool = json!({"name": t.name, "parameters": t.parameters});
            if let Some(d) = &t.description {
                tool["description"] = json!(d);
            }
            tool
        })
        .collect();
    let several = if parallel { ", or a JSON list of such objects to call several tools at once" } else { "" };
    format!(
        "You can call these tools:\n{}\n\nTo call a tool, answer with only a JSON object \
         {{\"name\": <tool name>, \"arguments\": <arguments object>}}{several}. \
         To answer without a tool, write your answer as plain text.",
        Value::Array(listed)
    )
}

/// The Lark grammar of an answer under `tool_choice: auto`: a call as `call_schema` has it for
/// `required`, or prose that does not open like JSON.
pub fn auto_grammar(tools: &[ToolSpec], parallel: bool) -> Option<String> {
    let calls = call_schema(tools, &ToolChoice::Required, parallel)?;
    Some(format!("start: calls | PROSE\ncalls: %json {calls}\nPROSE: /[^\\[{{][\\s\\S]*/\n"))
}

/// `messages` with the tools described in a system message (ahead of the first message, or
/// joined to it when it is the system prompt) and earlier tool turns rewritten as text.
pub fn rewrite(messages: Vec<ChatMessage>, tools: &[ToolSpec], parallel: bool) -> Vec<ChatMessage> {
    let prompt = system_prompt(tools, parallel);
    let mut names: HashMap<String, String> = HashMap::new();
    let mut out = Vec::with_capacity(messages.len() + 1);
    for mut m in messages {
        if let Some(calls) = m.tool_calls.take() {
            let written: Vec<Value> = calls
                .iter()
                .map(|c| {
                    let name = c.pointer("/function/name").cloned().unwrap_or(Value::Null);
                    if let (Some(id), Some(n)) = (c.get("id").and_then(Value::as_str), name.as_str()) {
                        names.insert(id.to_string(), n.to_string());
                    }
                    let arguments = match c.pointer("/function/arguments") {
                        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
                        Some(other) => other.clone(),
                        None => json!({}),
                    };
                    json!({"name": name, "arguments": arguments})
                })
                .collect();
            let json = match written.as_slice() {
                [one] => one.to_string(),
                _ => Value::Array(written).to_string(),
            };
            m.content = if m.content.trim().is_empty() { json } else { format!("{}\n{json}", m.content) };
        }
        if m.role == "tool" {
            let name = m.name.clone().or_else(|| m.tool_call_id.as_ref().and_then(|id| names.get(id).cloned()));
            let result = json!({"tool_result": {"name": name, "content": m.content}});
            m = ChatMessage::new("user", result.to_string());
        }
        out.push(m);
    }
    match out.first_mut() {
        Some(first) if first.role == "system" => first.content = format!("{}\n\n{prompt}", first.content),
        _ => out.insert(0, ChatMessage::new("system", prompt)),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> ToolSpec {
        ToolSpec {
            name: "get_weather".into(),
            description: Some("Weather in a city".into()),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
            strict: false,
        }
    }

    #[test]
    fn tool_turns_become_text_the_template_can_render() {
        let call = json!({"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}});
        let mut tool = ChatMessage::new("tool", "18C");
        tool.tool_call_id = Some("c1".into());
        let history = vec![
            ChatMessage::new("user", "Weather in Paris?"),
            ChatMessage::new("assistant", "").with_tool_calls(vec![call]),
            tool,
        ];
        let out = rewrite(history, &[weather()], true);
        assert_eq!(out[0].role, "system");
        assert!(
            out[0].content.contains("\"get_weather\"") && out[0].content.contains("JSON list"),
            "{}",
            out[0].content
        );
        assert_eq!(out[2].role, "assistant");
        assert!(out[2].tool_calls.is_none());
        let written: Value = serde_json::from_str(&out[2].content).expect("the call as JSON");
        assert_eq!(written, json!({"name": "get_weather", "arguments": {"city": "Paris"}}));
        assert_eq!(out[3].role, "user");
        let result: Value = serde_json::from_str(&out[3].content).expect("the result as JSON");
        assert_eq!(result, json!({"tool_result": {"name": "get_weather", "content": "18C"}}));
    }

    #[test]
    fn an_existing_system_prompt_is_kept_ahead_of_the_tools() {
        let out =
            rewrite(vec![ChatMessage::new("system", "Be brief."), ChatMessage::new("user", "x")], &[weather()], false);
        assert_eq!(out.len(), 2);
        assert!(out[0].content.starts_with("Be brief.\n\nYou can call these tools"), "{}", out[0].content);
        assert!(!out[0].content.contains("JSON list"), "one call at a time: {}", out[0].content);
    }
}
