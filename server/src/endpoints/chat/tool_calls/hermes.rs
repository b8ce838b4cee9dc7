//! Hermes-style calls, what Qwen2.5's chat template asks for:
//! `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, one block per call.

use serde_json::json;

use super::json::{calls_at, JsonFormat};
use super::schema::strict_call_schema;
use super::{Recognized, ToolCallFormat, ToolSpec};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// `<tool_call>` blocks; with `bare_json`, also calls written as plain or fenced JSON (see
/// [`JsonFormat`]), which small Qwen2.5 models write more often than the tags.
#[derive(Clone, Copy, Debug)]
pub struct HermesFormat {
    pub bare_json: bool,
}

impl Default for HermesFormat {
    /// Tags and bare JSON: what Qwen2.5-Coder-0.5B-Instruct was measured to write.
    fn default() -> Self {
        Self { bare_json: true }
    }
}

impl ToolCallFormat for HermesFormat {
    fn openers(&self) -> &[&'static str] {
        if self.bare_json {
            &[OPEN, "{", "[", "```"]
        } else {
            &[OPEN]
        }
    }

    fn recognize(&self, text: &str, tools: &[ToolSpec], at_end: bool) -> Recognized {
        if text.starts_with(OPEN) {
            tagged(text, tools, at_end)
        } else if self.bare_json {
            JsonFormat.recognize(text, tools, at_end)
        } else {
            Recognized::NotHere
        }
    }
}

/// The Lark grammar of an answer under `tool_choice: auto` when some tool is `strict`, or
/// `None` when none is. The answer is one of:
/// - calls as bare JSON (what Qwen2.5-Coder writes most), a list of them with `parallel`;
/// - prose up to a first `<tool_call>` tag, then calls in tags (several with `parallel`)
///   and nothing after the last;
/// - prose alone.
///
/// Every call is valid by [`strict_call_schema`], its JSON spaced as Qwen2.5 writes it.
/// Prose opens with neither `{` nor `[` and never writes a `"name":` key, so the parser,
/// which also reads bare JSON calls inside prose, finds no call the grammar did not check.
/// The prose before a tag is a lazy lexeme ending at the tag: a greedy one would read on
/// past it and never hand over to the call.
pub fn strict_auto_grammar(tools: &[ToolSpec], parallel: bool) -> Option<String> {
    let mut call = strict_call_schema(tools)?;
    call["x-guidance"] = json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "});
    let (bare, more) = if parallel {
        let list = json!({"type": "array", "items": call, "minItems": 1});
        (json!({"anyOf": [call, list], "x-guidance": call["x-guidance"]}), " (\"\\n<tool_call>\" block)*")
    } else {
        (call.clone(), "")
    };
    Some(format!(
        "start: PROSE | calls | lead block{more}\n\
         calls: %json {bare}\n\
         block: \"\\n\" %json {call} \"\\n</tool_call>\"\n\
         lead[suffix=\"<tool_call>\"]: LEAD\n\
         LEAD: /(?s:.*)/ & ~/[\\[{{](?s:.*)/ & ~/(?s:.*)\"name\"\\s*:(?s:.*)/\n\
         PROSE: /(?s:.+)/ & ~/[\\[{{](?s:.*)/ & ~/(?s:.*)(<tool_call>|\"name\"\\s*:)(?s:.*)/\n"
    ))
}

/// `text` starts with `<tool_call>`. The block holds one call value (or a list of calls) and
/// normally ends at `</tool_call>`; models also drop the closing tag before the end of the
/// output or before the next `<tool_call>`, so those end a block too.
fn tagged(text: &str, tools: &[ToolSpec], at_end: bool) -> Recognized {
    let inner = text.get(OPEN.len()..).unwrap_or("").trim_start();
    // Not a call of a declared tool: the tag and what follows stay prose.
    let (calls, len) = match calls_at(inner, tools, at_end) {
        Ok(found) => found,
        Err(verdict) => return verdict,
    };
    let after_value = inner.get(len..).unwrap_or("");
    let tail = after_value.trim_start();
    let tail_at = text.len() - tail.len();
    if tail.starts_with(CLOSE) {
        Recognized::Calls(tail_at + CLOSE.len(), calls)
    } else if tail.starts_with(OPEN) {
        Recognized::Calls(tail_at, calls)
    } else if tail.is_empty() || CLOSE.starts_with(tail) || OPEN.starts_with(tail) {
        // Whitespace or a partial tag: only the end of the output settles it.
        if at_end {
            Recognized::Calls(text.len(), calls)
        } else {
            Recognized::Pending
        }
    } else {
        // Prose right after the call, no closing tag: the call still counts, the prose is
        // content.
        Recognized::Calls(text.len() - after_value.len(), calls)
    }
}
