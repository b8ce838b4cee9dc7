//! How a chat completion is rendered: the `<think>` split, tool calls found in the content,
//! logprobs (chat's layout) and extras, for the whole message and for the stream's chunks.

use entrobatch::{Engine, FinishReason, GeneratedToken};

use super::reasoning::{ReasoningSplitter, Split};
use super::response::{ChatChunkChoice, ChatCompletionChunk, ChatLogprob, ChatLogprobs, Delta, TopChatLogprob};
use super::tool_calls::ToolCallStream;
use super::tools::tool_deltas;
use crate::response::format::{token_text, Extras, Frame};
use crate::response::stream::StreamFormat;
use crate::response::{TokenExtras, Usage};

pub(super) struct ChatFormat {
    pub frame: Frame,
    pub logprobs: bool,
    pub extras: Extras,
    pub splitter: Option<ReasoningSplitter>,
    /// Finds tool calls in the content as it streams; `None` when no call can come back.
    pub tool_stream: Option<ToolCallStream>,
    /// `echo`: text the client sent, returned ahead of the output (never parsed for calls).
    pub echo: Option<String>,
}

impl ChatFormat {
    pub fn split(&mut self, text: &str) -> Split {
        match &mut self.splitter {
            Some(s) => s.push(text),
            None => Split { reasoning: String::new(), content: text.to_string() },
        }
    }

    pub fn split_finish(&mut self) -> Split {
        self.splitter.as_mut().map(ReasoningSplitter::finish).unwrap_or_default()
    }

    fn chunk(&self, choices: Vec<ChatChunkChoice>) -> ChatCompletionChunk {
        self.frame.body("chat.completion.chunk", choices, None)
    }

    /// The chunks for this much output: reasoning, then content (or, with tools, the content
    /// and calls the tool parser has decided on), with the tokens' logprobs and extras on the
    /// last one.
    fn delta_chunks(&mut self, split: Split, tokens: &[GeneratedToken], finished: bool) -> Vec<ChatCompletionChunk> {
        let mut deltas: Vec<Delta> = Vec::new();
        if !split.reasoning.is_empty() {
            deltas.push(Delta { reasoning_content: Some(split.reasoning), ..Delta::default() });
        }
        match &mut self.tool_stream {
            Some(stream) => {
                let mut decided = stream.push(&split.content);
                if finished {
                    decided.extend(stream.finish());
                }
                deltas.extend(decided.into_iter().flat_map(tool_deltas));
            }
            None if !split.content.is_empty() => deltas.push(Delta::content(split.content)),
            None => {}
        }
        let carries_extras =
            !tokens.is_empty() && (self.logprobs || self.extras.return_metrics || self.extras.return_token_ids);
        if deltas.is_empty() && carries_extras {
            deltas.push(Delta::default());
        }
        let last = deltas.len().saturating_sub(1);
        let mut chunks = Vec::with_capacity(deltas.len());
        for (i, delta) in deltas.into_iter().enumerate() {
            let on_last = i == last;
            let choice = ChatChunkChoice {
                logprobs: (self.logprobs && on_last).then(|| chat_logprobs(&self.frame.state.engine, tokens)),
                extras: if on_last { self.extras.for_tokens(tokens) } else { TokenExtras::default() },
                ..ChatChunkChoice::delta(delta)
            };
            chunks.push(self.chunk(vec![choice]));
        }
        chunks
    }
}

impl StreamFormat for ChatFormat {
    type Chunk = ChatCompletionChunk;

    fn opening(&mut self) -> Vec<ChatCompletionChunk> {
        let delta = Delta { role: Some("assistant"), content: Some(String::new()), ..Delta::default() };
        let mut chunks = vec![self.chunk(vec![ChatChunkChoice::delta(delta)])];
        // As vLLM streams it: the echoed text in a chunk of its own, right after the role.
        if let Some(echo) = self.echo.take() {
            chunks.push(self.chunk(vec![ChatChunkChoice::delta(Delta::content(echo))]));
        }
        chunks
    }

    fn on_tokens(&mut self, tokens: &[GeneratedToken], text: &str) -> Vec<ChatCompletionChunk> {
        let split = self.split(text);
        self.delta_chunks(split, tokens, false)
    }

    fn on_finish(&mut self, reason: FinishReason, schema_errors: Option<Vec<String>>) -> Vec<ChatCompletionChunk> {
        let rest = self.split_finish();
        let mut chunks = self.delta_chunks(rest, &[], true);
        let called = self.tool_stream.as_ref().is_some_and(|s| s.calls_sent() > 0);
        let label = if called && reason == FinishReason::Stop { "tool_calls" } else { reason.as_str() };
        let choice = ChatChunkChoice {
            finish_reason: Some(label),
            extras: TokenExtras { schema_errors, ..TokenExtras::default() },
            ..ChatChunkChoice::delta(Delta::default())
        };
        chunks.push(self.chunk(vec![choice]));
        chunks
    }

    fn usage_chunk(&self, usage: Usage) -> ChatCompletionChunk {
        self.frame.body("chat.completion.chunk", Vec::new(), Some(usage))
    }

    fn with_index(mut chunk: ChatCompletionChunk, index: usize) -> ChatCompletionChunk {
        chunk.choices.iter_mut().for_each(|c| c.index = index);
        chunk
    }
}

/// Chat layout: `{"content": [{token, logprob, bytes, top_logprobs: [...]}]}`; tokens
/// without logprobs are left out.
pub fn chat_logprobs(engine: &Engine, tokens: &[GeneratedToken]) -> ChatLogprobs {
    let top = |id: u32, logprob: f32| {
        let token = token_text(engine, id);
        TopChatLogprob { bytes: token.as_bytes().to_vec(), token, logprob: f64::from(logprob) }
    };
    let content = tokens
        .iter()
        .filter_map(|t| {
            let lp = t.logprob.as_ref()?;
            let TopChatLogprob { token, logprob, bytes } = top(t.token_id, lp.logprob);
            let top_logprobs = lp.top_logprobs.iter().map(|&(id, p)| top(id, p)).collect();
            Some(ChatLogprob { token, logprob, bytes, top_logprobs })
        })
        .collect();
    ChatLogprobs { content }
}
