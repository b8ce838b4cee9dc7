//! The chat endpoint's tool-calling fields: `tools` / `tool_choice` / `parallel_tool_calls`
//! turned into the template's tool list, a grammar where a call is required, and the parser
//! that finds the calls in what the model writes (whole, or as a stream of OpenAI
//! `tool_calls` deltas).

use std::sync::Arc;

use serde_json::Value;

use super::response::{Delta, FunctionCall, FunctionDelta, ToolCall, ToolCallDelta};
use super::tool_calls::{
    call_schema, generic_auto_grammar, generic_rewrite, hermes_strict_auto_grammar, new_call_id, HermesFormat,
    JsonFormat, Parsed, ToolCallFormat, ToolCallStream, ToolChoice, ToolDelta, ToolSpec,
};
use crate::response::error::ApiError;
use entrobatch::structured::StructuredOutput;
use entrobatch::{ChatMessage, GenerationParams};

/// A request's tools, once checked: what the response parser looks for.
pub struct ToolUse {
    specs: Vec<ToolSpec>,
    format: Arc<dyn ToolCallFormat>,
    /// `parallel_tool_calls` (default true); false keeps the first call only.
    parallel: bool,
}

/// The generic format's part of a request whose chat template cannot render tools: the tools
/// described in a system message, the history's tool turns rewritten as text
/// (`tool_calls/generic.rs`).
pub struct GenericTools {
    specs: Vec<ToolSpec>,
    parallel: bool,
}

impl GenericTools {
    pub fn rewrite(&self, messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
        generic_rewrite(messages, &self.specs, self.parallel)
    }
}

/// What `parse_tools` found.
pub struct ParsedTools {
    /// The parser for calls in the output; `None` when none can come back.
    pub parser: Option<ToolUse>,
    pub generic: Option<GenericTools>,
}

/// Reads `tools`, `tool_choice` and `parallel_tool_calls` into `params` (the template's tool
/// list, a call grammar for `required` or a named function) and returns the parser to run on
/// the output, or `None` when no call can come back (`tool_choice: "none"`, no tools).
/// `template_renders_tools`: false puts the request in the generic format (see
/// `tool_calls/generic.rs`): no tool list for the template, an answer grammar under `auto`.
pub fn parse_tools(
    tools: Option<Value>,
    tool_choice: Option<Value>,
    parallel: Option<bool>,
    params: &mut GenerationParams,
    template_renders_tools: bool,
) -> Result<ParsedTools, ApiError> {
    let tools = tools.filter(|t| !t.is_null());
    let specs = match &tools {
        Some(list) => ToolSpec::parse_list(list).map_err(|e| ApiError::invalid_param(e.field(), e.to_string()))?,
        None => Vec::new(),
    };
    let choice = ToolChoice::parse(tool_choice.as_ref(), &specs)
        .map_err(|e| ApiError::invalid_param("tool_choice", e.to_string()))?;
    if specs.is_empty() {
        return Ok(ParsedTools { parser: None, generic: None });
    }
    let parallel = parallel.unwrap_or(true);
    let generic = (!template_renders_tools).then(|| GenericTools { specs: specs.clone(), parallel });
    if template_renders_tools {
        params.tools = match tools {
            Some(Value::Array(list)) => Some(list),
            _ => None,
        };
    }
    if choice == ToolChoice::None {
        return Ok(ParsedTools { parser: None, generic });
    }
    let required = call_schema(&specs, &choice, parallel);
    let strict_auto = required.is_none() && generic.is_none() && specs.iter().any(|t| t.strict);
    let constraint = match required {
        // OpenAI's `strict` per function: when every tool the choice allows is strict, a
        // keyword no grammar enforces is a 400 naming it; otherwise the calls are decoded
        // best effort and checked after, as a `json_schema` without `strict` is.
        Some(schema) if choice.allowed(&specs).all(|t| t.strict) => Some(StructuredOutput::StrictJsonSchema(schema)),
        Some(schema) => Some(StructuredOutput::JsonSchema(schema)),
        None if generic.is_some() => generic_auto_grammar(&specs, parallel).map(StructuredOutput::Lark),
        None => hermes_strict_auto_grammar(&specs, parallel).map(StructuredOutput::Lark),
    };
    if let Some(constraint) = constraint {
        if params.structured.is_some() {
            let (param, why) = if generic.is_some() {
                (
                    "tool_choice",
                    "this model's chat template cannot render tools, so its calls are a structured output of \
                     their own: drop response_format",
                )
            } else if strict_auto {
                ("tools", "strict tools' calls are a structured output of their own: drop response_format or `strict`")
            } else {
                (
                    "tool_choice",
                    "a required tool call is itself a structured output: drop response_format or use tool_choice \
                     auto",
                )
            };
            return Err(ApiError::invalid_param(param, why));
        }
        params.structured = Some(constraint);
    }
    let format: Arc<dyn ToolCallFormat> =
        if generic.is_some() { Arc::new(JsonFormat) } else { Arc::new(HermesFormat::default()) };
    Ok(ParsedTools { parser: Some(ToolUse { specs, format, parallel }), generic })
}

impl ToolUse {
    pub fn parse(&self, text: &str) -> Parsed {
        let mut parsed = self.format.parse(text, &self.specs);
        parsed.calls.truncate(self.max_calls());
        parsed
    }

    pub fn stream(&self) -> ToolCallStream {
        ToolCallStream::new(self.format.clone(), self.specs.clone()).with_max_calls(self.max_calls())
    }

    fn max_calls(&self) -> usize {
        if self.parallel {
            usize::MAX
        } else {
            1
        }
    }
}

/// A response message's `tool_calls`.
pub fn tool_calls(parsed: &Parsed) -> Vec<ToolCall> {
    parsed
        .calls
        .iter()
        .map(|c| ToolCall {
            id: new_call_id(),
            kind: "function",
            function: FunctionCall { name: c.name.clone(), arguments: c.arguments.clone() },
        })
        .collect()
}

/// The stream deltas of one decided piece, as OpenAI sends them: a call's id and name
/// first (empty arguments), then its arguments.
pub fn tool_deltas(delta: ToolDelta) -> Vec<Delta> {
    match delta {
        ToolDelta::Content(text) => vec![Delta::content(text)],
        ToolDelta::Call { index, id, name, arguments } => {
            let named = ToolCallDelta {
                index,
                id: Some(id),
                kind: Some("function"),
                function: FunctionDelta { name: Some(name), arguments: String::new() },
            };
            let args = ToolCallDelta { index, id: None, kind: None, function: FunctionDelta { name: None, arguments } };
            vec![
                Delta { tool_calls: Some(vec![named]), ..Delta::default() },
                Delta { tool_calls: Some(vec![args]), ..Delta::default() },
            ]
        }
    }
}
