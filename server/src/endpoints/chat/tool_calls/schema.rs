//! The JSON Schema of a valid call, for decoding constrained to it (`tool_choice` `required`
//! or a named function). What it admits is exactly what [`JsonFormat`](super::JsonFormat)
//! reads as calls: `{"name": ..., "arguments": {...}}`, or a list of those.

use serde_json::{json, Value};

use super::{ToolChoice, ToolSpec};

/// The schema that forces a call allowed by `choice`, or `None` when the model may answer
/// in prose (`none`, `auto`) or the named function is not among `tools`.
///
/// One call: an object with exactly `name` (a `const`) and `arguments` (that tool's
/// parameters schema), both required; `anyOf` over the allowed tools when there are several.
/// With `parallel`, an array of one or more such calls.
pub fn call_schema(tools: &[ToolSpec], choice: &ToolChoice, parallel: bool) -> Option<Value> {
    if matches!(choice, ToolChoice::None | ToolChoice::Auto) {
        return None;
    }
    let call = any_call(choice.allowed(tools).map(|t| one_call(t, &t.parameters)).collect())?;
    Some(if parallel { json!({ "type": "array", "items": call, "minItems": 1 }) } else { call })
}

/// The schema of one call under `tool_choice: auto` when some tool is `strict`: its name and
/// `parameters` for a strict tool, its name and any object for the others; `None` when no
/// tool is strict (nothing to enforce).
pub fn strict_call_schema(tools: &[ToolSpec]) -> Option<Value> {
    if !tools.iter().any(|t| t.strict) {
        return None;
    }
    let any_object = json!({ "type": "object" });
    any_call(tools.iter().map(|t| one_call(t, if t.strict { &t.parameters } else { &any_object })).collect())
}

fn any_call(mut calls: Vec<Value>) -> Option<Value> {
    match calls.len() {
        0 => None,
        // A single alternative needs no anyOf: simpler for grammar compilers.
        1 => calls.pop(),
        _ => Some(json!({ "anyOf": calls })),
    }
}

fn one_call(tool: &ToolSpec, parameters: &Value) -> Value {
    // An empty or missing schema still has to produce an object (arguments are one).
    let arguments = match parameters {
        Value::Object(o) if !o.is_empty() => parameters.clone(),
        _ => json!({ "type": "object" }),
    };
    json!({
        "type": "object",
        "properties": {
            "name": { "const": tool.name },
            "arguments": arguments,
        },
        "required": ["name", "arguments"],
        "additionalProperties": false,
    })
}
