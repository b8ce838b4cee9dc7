//! Tool calls in a streamed output. Prose goes out as soon as it cannot be part of a call;
//! from a possible call's opener (`{`, `[`, a fence, `<tool_call>`, or a prefix of one at the
//! end of the text so far) text is held until the format decides, and each call is sent whole
//! once its text is complete. The result is the same as parsing the whole output at once.

use std::sync::Arc;

use super::{new_call_id, scan, ParsedCall, Piece, ToolCallFormat, ToolSpec};

/// What a stream step yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolDelta {
    /// Prose to send on as `content`.
    Content(String),
    /// A complete call; `index` counts calls from 0 in this output (OpenAI's `tool_calls[i].index`).
    Call { index: usize, id: String, name: String, arguments: String },
}

pub struct ToolCallStream {
    format: Arc<dyn ToolCallFormat>,
    tools: Vec<ToolSpec>,
    /// Text not yet decided; it starts at a possible call.
    held: String,
    /// Whitespace after the last content sent, held because the parsed content is trimmed:
    /// it goes out only if more prose follows.
    trailing_ws: String,
    sent_content: bool,
    calls: usize,
    /// Calls past this many are dropped (`parallel_tool_calls: false` allows one).
    max_calls: usize,
}

impl ToolCallStream {
    pub fn new(format: Arc<dyn ToolCallFormat>, tools: Vec<ToolSpec>) -> Self {
        Self {
            format,
            tools,
            held: String::new(),
            trailing_ws: String::new(),
            sent_content: false,
            calls: 0,
            max_calls: usize::MAX,
        }
    }

    /// Sends at most `n` calls.
    pub fn with_max_calls(mut self, n: usize) -> Self {
        self.max_calls = n;
        self
    }

    /// The next piece of output text.
    pub fn push(&mut self, delta: &str) -> Vec<ToolDelta> {
        self.held.push_str(delta);
        self.step(false)
    }

    /// The output ended: settles everything held.
    pub fn finish(&mut self) -> Vec<ToolDelta> {
        self.step(true)
    }

    /// Calls sent so far (a non-zero count makes the finish reason `tool_calls`).
    pub fn calls_sent(&self) -> usize {
        self.calls
    }

    /// Whether text is held back waiting for a decision.
    #[cfg(test)]
    pub fn is_holding(&self) -> bool {
        !self.held.is_empty()
    }

    fn step(&mut self, at_end: bool) -> Vec<ToolDelta> {
        let held = std::mem::take(&mut self.held);
        let (pieces, undecided) = scan(&*self.format, &held, &self.tools, at_end);
        let mut out = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Content(text) => self.content(text, &mut out),
                Piece::Calls(calls) => calls.into_iter().for_each(|c| self.call(c, &mut out)),
            }
        }
        self.held = held.get(undecided..).unwrap_or("").to_string();
        out
    }

    fn content(&mut self, text: &str, out: &mut Vec<ToolDelta>) {
        let body = text.trim_end();
        if body.is_empty() {
            // Leading whitespace of the output is dropped; later runs wait for more prose.
            if self.sent_content {
                self.trailing_ws.push_str(text);
            }
            return;
        }
        let mut send = std::mem::take(&mut self.trailing_ws);
        send.push_str(if self.sent_content { body } else { body.trim_start() });
        self.trailing_ws = text[body.len()..].to_string();
        self.sent_content = true;
        match out.last_mut() {
            Some(ToolDelta::Content(prev)) => prev.push_str(&send),
            _ => out.push(ToolDelta::Content(send)),
        }
    }

    fn call(&mut self, call: ParsedCall, out: &mut Vec<ToolDelta>) {
        if self.calls >= self.max_calls {
            return;
        }
        out.push(ToolDelta::Call { index: self.calls, id: new_call_id(), name: call.name, arguments: call.arguments });
        self.calls += 1;
    }
}
