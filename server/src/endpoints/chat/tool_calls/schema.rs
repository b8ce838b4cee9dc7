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
    let allowed: Vec<&ToolSpec> = match choice {
        ToolChoice::None | ToolChoice::Auto => return None,
        ToolChoice::Required => tools.iter().collect(),
        ToolChoice::Function(name) => tools.iter().filter(|t| &t.name == name).collect(),
    };
    let mut calls: Vec<Value> = allowed.into_iter().map(one_call).collect();
    let call = match calls.len() {
        0 => return None,
        // A single alternative needs no anyOf: simpler for grammar compilers.
        1 => calls.pop()?,
        _ => json!({ "anyOf": calls }),
    };
    Some(if parallel { json!({ "type": "array", "items": call, "minItems": 1 }) } else { call })
}

fn one_call(tool: &ToolSpec) -> Value {
    // An empty or missing schema still has to produce an object (arguments are one).
    let arguments = match &tool.parameters {
        Value::Object(o) if !o.is_empty() => tool.parameters.clone(),
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
