//! A chat reply as the other dialects (Anthropic's Messages, Ollama's chat) need it: the
//! output split into thinking, text and tool calls, in order, with none of OpenAI's chunk
//! shapes. It runs the same `<think>` splitter and tool-call stream as `/v1/chat/completions`,
//! so every dialect reads the same output the same way, streamed or whole.

use entrobatch::RequestHandle;

use super::handler::{prompt_opens_think, ParsedChat};
use super::reasoning::ReasoningSplitter;
use super::tool_calls::{ToolCallStream, ToolDelta};
use crate::state::AppState;

/// One decided piece of a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyPiece {
    /// Text inside the model's think block.
    Thinking(String),
    Text(String),
    /// A complete call of a declared tool; `arguments` is compact JSON text of an object.
    Call {
        id: String,
        name: String,
        arguments: String,
    },
}

pub struct ReplyParser {
    splitter: Option<ReasoningSplitter>,
    tool_stream: Option<ToolCallStream>,
}

impl ReplyParser {
    /// The parser for one copy of `chat`'s output: a thinking split when the template has a
    /// thinking switch the request left on, a tool-call stream when a call can come back.
    pub fn new(state: &AppState, chat: &ParsedChat, handle: &RequestHandle) -> Self {
        let thinking = state.thinking_template && chat.parsed.params.enable_thinking != Some(false);
        Self {
            splitter: thinking.then(|| ReasoningSplitter::new(prompt_opens_think(state, &handle.prompt_token_ids))),
            tool_stream: chat.tools.as_ref().map(|t| t.stream()),
        }
    }

    /// The parser of an output no chat template framed: all of it is text.
    pub fn text_only() -> Self {
        Self { splitter: None, tool_stream: None }
    }

    /// The pieces this much more output decides.
    pub fn push(&mut self, text: &str) -> Vec<ReplyPiece> {
        let (reasoning, content) = match &mut self.splitter {
            Some(s) => {
                let split = s.push(text);
                (split.reasoning, split.content)
            }
            None => (String::new(), text.to_string()),
        };
        self.pieces(reasoning, content, false)
    }

    /// The output ended: everything still held back.
    pub fn finish(&mut self) -> Vec<ReplyPiece> {
        let split = self.splitter.as_mut().map(ReasoningSplitter::finish).unwrap_or_default();
        self.pieces(split.reasoning, split.content, true)
    }

    /// Calls sent so far: a finished reply with any is a tool-use turn.
    pub fn calls_sent(&self) -> usize {
        self.tool_stream.as_ref().map_or(0, ToolCallStream::calls_sent)
    }

    /// The whole reply of a finished output, merged: one thinking piece, then text and calls.
    pub fn parse_whole(mut self, text: &str) -> Vec<ReplyPiece> {
        let mut pieces = self.push(text);
        pieces.extend(self.finish());
        merge(pieces)
    }

    fn pieces(&mut self, reasoning: String, content: String, at_end: bool) -> Vec<ReplyPiece> {
        let mut out = Vec::new();
        if !reasoning.is_empty() {
            out.push(ReplyPiece::Thinking(reasoning));
        }
        match &mut self.tool_stream {
            Some(stream) => {
                let mut decided = stream.push(&content);
                if at_end {
                    decided.extend(stream.finish());
                }
                out.extend(decided.into_iter().map(|d| match d {
                    ToolDelta::Content(text) => ReplyPiece::Text(text),
                    ToolDelta::Call { id, name, arguments, .. } => ReplyPiece::Call { id, name, arguments },
                }));
            }
            None if !content.is_empty() => out.push(ReplyPiece::Text(content)),
            None => {}
        }
        out
    }
}

/// Adjacent pieces of the same kind joined: what a whole reply lists.
fn merge(pieces: Vec<ReplyPiece>) -> Vec<ReplyPiece> {
    let mut merged: Vec<ReplyPiece> = Vec::with_capacity(pieces.len());
    for piece in pieces {
        match (merged.last_mut(), piece) {
            (Some(ReplyPiece::Thinking(a)), ReplyPiece::Thinking(b))
            | (Some(ReplyPiece::Text(a)), ReplyPiece::Text(b)) => a.push_str(&b),
            (_, piece) => merged.push(piece),
        }
    }
    merged
}

/// A call's arguments as the JSON object the tool-call parsers guarantee they are.
pub fn call_arguments(arguments: &str) -> serde_json::Value {
    serde_json::from_str(arguments).unwrap_or_else(|_| serde_json::Value::Object(serde_json::Map::new()))
}
