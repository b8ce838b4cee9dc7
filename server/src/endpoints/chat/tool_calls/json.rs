//! Calls written as bare JSON, the form Qwen2.5-Coder-0.5B-Instruct uses most: an object
//! `{"name": ..., "arguments": {...}}`, a list of them, or either inside a ```` ```json ````
//! fence. Also what a grammar built from [`call_schema`](super::call_schema) produces.

use serde_json::{Map, Value};

use super::{ParsedCall, Recognized, ToolCallFormat, ToolSpec};

const FENCE: &str = "```";

/// Bare or fenced JSON calls, anywhere in the output.
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonFormat;

impl ToolCallFormat for JsonFormat {
    fn openers(&self) -> &[&'static str] {
        &["{", "[", FENCE]
    }

    fn recognize(&self, text: &str, tools: &[ToolSpec], at_end: bool) -> Recognized {
        if text.starts_with(FENCE) {
            fenced(text, tools, at_end)
        } else {
            bare(text, tools, at_end)
        }
    }
}

/// A JSON value at `text`'s start (after whitespace), or why there is none.
pub(super) enum JsonAt {
    /// The value and the byte offset just past it.
    Value(Value, usize),
    /// `text` ends inside what is so far valid JSON.
    Incomplete,
    Invalid,
}

pub(super) fn json_at(text: &str, at_end: bool) -> JsonAt {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    match values.next() {
        Some(Ok(v)) => JsonAt::Value(v, values.byte_offset()),
        Some(Err(e)) if e.is_eof() => JsonAt::Incomplete,
        // serde_json reports a number cut short (`1.`, `-`, `2e`) as a syntax error, not as
        // the end of input: if one more digit would mend it, more text may too.
        Some(Err(_)) if !at_end && !matches!(json_at(&format!("{text}0"), true), JsonAt::Invalid) => JsonAt::Incomplete,
        Some(Err(_)) => JsonAt::Invalid,
        None => JsonAt::Incomplete,
    }
}

/// `text` starts with `{` or `[`.
fn bare(text: &str, tools: &[ToolSpec], at_end: bool) -> Recognized {
    // A call object opens with a key and a call list with an object: checking that first
    // releases prose braces (`fn main() {`, `[1]`) at once instead of holding them to the end.
    let after = text.get(1..).unwrap_or("").trim_start();
    let wanted = if text.starts_with('{') { '"' } else { '{' };
    match after.chars().next() {
        None if at_end => return Recognized::NotHere,
        None => return Recognized::Pending,
        Some(c) if c != wanted => return Recognized::NotHere,
        Some(_) => {}
    }
    match json_at(text, at_end) {
        JsonAt::Value(v, len) => match calls_from_value(&v, tools) {
            Some(calls) => Recognized::Calls(len, calls),
            // A whole value that is not a call is data: what is nested in it stays data too.
            None => Recognized::Content(len),
        },
        JsonAt::Incomplete if !at_end => Recognized::Pending,
        // An unfinished value at the end may still hold finished calls (a truncated list).
        JsonAt::Incomplete | JsonAt::Invalid => Recognized::NotHere,
    }
}

/// `text` starts with a fence: calls when the fence (info string empty or `json`) holds
/// nothing but one call value, closed or cut off by the end of output.
fn fenced(text: &str, tools: &[ToolSpec], at_end: bool) -> Recognized {
    let after_fence = text.get(FENCE.len()..).unwrap_or("");
    let lower = after_fence.get(..4.min(after_fence.len())).map(str::to_ascii_lowercase);
    if !at_end && lower.as_deref().is_some_and(|l| "json".starts_with(l) && l.len() < 4) {
        return Recognized::Pending; // still reading the info string
    }
    let info_len = if lower.as_deref() == Some("json") { 4 } else { 0 };
    let inner = after_fence.get(info_len..).unwrap_or("").trim_start();
    match inner.chars().next() {
        None if at_end => return Recognized::NotHere,
        None => return Recognized::Pending,
        Some('{' | '[') => {}
        // Any other fence (```python) is prose; its contents are scanned like the rest.
        Some(_) => return Recognized::NotHere,
    }
    let (calls, len) = match calls_at(inner, tools, at_end) {
        Ok(found) => found,
        Err(verdict) => return verdict,
    };
    let tail = inner.get(len..).unwrap_or("").trim_start();
    let tail_at = text.len() - tail.len();
    if tail.starts_with(FENCE) {
        Recognized::Calls(tail_at + FENCE.len(), calls)
    } else if FENCE.starts_with(tail) {
        // Nothing or part of the closing fence follows: the output may yet close it.
        if at_end {
            Recognized::Calls(text.len(), calls)
        } else {
            Recognized::Pending
        }
    } else {
        // More text inside the fence: the opening line stays prose, the value is looked at
        // as bare JSON.
        Recognized::NotHere
    }
}

/// The calls a JSON value spells: a call object, or a non-empty list of nothing but calls.
/// The calls of declared tools in the JSON value `text` starts with, and its length; or the
/// verdict when there is none (not a call: prose; cut short: pending unless at the end).
pub(super) fn calls_at(text: &str, tools: &[ToolSpec], at_end: bool) -> Result<(Vec<ParsedCall>, usize), Recognized> {
    match json_at(text, at_end) {
        JsonAt::Value(v, len) => calls_from_value(&v, tools).map(|calls| (calls, len)).ok_or(Recognized::NotHere),
        JsonAt::Incomplete if !at_end => Err(Recognized::Pending),
        JsonAt::Incomplete | JsonAt::Invalid => Err(Recognized::NotHere),
    }
}

pub(super) fn calls_from_value(v: &Value, tools: &[ToolSpec]) -> Option<Vec<ParsedCall>> {
    match v {
        Value::Object(m) => call_from_object(m, tools).map(|c| vec![c]),
        Value::Array(items) if !items.is_empty() => {
            items.iter().map(|i| i.as_object().and_then(|m| call_from_object(m, tools))).collect()
        }
        _ => None,
    }
}

/// Keys a call object may have. A `name` among other keys (`{"name": "search", "age": 3}`)
/// is data that happens to share a tool's name, not a call.
const CALL_KEYS: &[&str] = &["name", "arguments", "parameters", "id", "type"];

fn call_from_object(m: &Map<String, Value>, tools: &[ToolSpec]) -> Option<ParsedCall> {
    if !m.contains_key("name") {
        // The OpenAI message shape, which models sometimes echo from their prompt:
        // {"type": "function", "function": {"name": ..., "arguments": ...}}.
        let wrapper = m.keys().all(|k| matches!(k.as_str(), "function" | "id" | "type"));
        return match m.get("function") {
            Some(Value::Object(f)) if wrapper => call_from_object(f, tools),
            _ => None,
        };
    }
    if !m.keys().all(|k| CALL_KEYS.contains(&k.as_str())) {
        return None;
    }
    let name = m.get("name")?.as_str()?;
    if !tools.iter().any(|t| t.name == name) {
        return None;
    }
    // `parameters` is what the prompt's tool list calls them, and models echo it.
    let arguments = match m.get("arguments").or_else(|| m.get("parameters")) {
        None | Some(Value::Null) => "{}".to_string(),
        Some(obj @ Value::Object(_)) => obj.to_string(),
        // OpenAI's own encoding: the object as a JSON string.
        Some(Value::String(s)) if s.trim().is_empty() => "{}".to_string(),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(obj @ Value::Object(_)) => obj.to_string(),
            _ => return None,
        },
        Some(_) => return None,
    };
    Some(ParsedCall { name: name.to_string(), arguments })
}
