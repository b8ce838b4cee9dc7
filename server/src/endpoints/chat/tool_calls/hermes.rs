//! Hermes-style calls, what Qwen2.5's chat template asks for:
//! `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, one block per call.

use super::json::{calls_at, JsonFormat};
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
