//! `/v1/chat/completions` bodies: the whole response, the stream chunks, and chat's
//! logprobs layout. Field order is wire order (see `crate::response`).

use serde::Serialize;

use crate::response::{Envelope, TokenExtras};

/// `object: "chat.completion"`.
pub type ChatCompletion = Envelope<ChatChoice>;

#[derive(Debug, Serialize)]
pub struct ChatChoice {
    pub index: usize,
    pub message: ResponseMessage,
    /// `null` unless the request asked for logprobs.
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: &'static str,
    #[serde(flatten)]
    pub extras: TokenExtras,
}

/// The assistant's message.
#[derive(Debug, Serialize)]
pub struct ResponseMessage {
    pub role: &'static str,
    /// `null` only when the model answered with tool calls and nothing else.
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// Present only for templates with a thinking switch; `null` there when the model did
    /// not think.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<Option<String>>,
}

#[derive(Debug, Serialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCall,
}

#[derive(Debug, Serialize)]
pub struct FunctionCall {
    pub name: String,
    /// JSON text, as OpenAI sends it.
    pub arguments: String,
}

/// `object: "chat.completion.chunk"`.
pub type ChatCompletionChunk = Envelope<ChatChunkChoice>;

#[derive(Debug, Serialize)]
pub struct ChatChunkChoice {
    pub index: usize,
    pub delta: Delta,
    pub logprobs: Option<ChatLogprobs>,
    /// `null` until the closing chunk.
    pub finish_reason: Option<&'static str>,
    #[serde(flatten)]
    pub extras: TokenExtras,
}

impl ChatChunkChoice {
    /// A choice with only a delta: no logprobs, not finished, no extras.
    pub fn delta(delta: Delta) -> Self {
        Self { index: 0, delta, logprobs: None, finish_reason: None, extras: TokenExtras::default() }
    }
}

/// One piece of the message; each chunk sets only what it adds (`{}` when nothing).
#[derive(Debug, Default, Serialize)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

impl Delta {
    pub fn content(text: impl Into<String>) -> Self {
        Self { content: Some(text.into()), ..Self::default() }
    }
}

/// A streamed call: the first delta of a call names it (`id`, `type`, `function.name`,
/// empty arguments), the next carries its arguments under the same `index`.
#[derive(Debug, Serialize)]
pub struct ToolCallDelta {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionDelta,
}

#[derive(Debug, Serialize)]
pub struct FunctionDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub arguments: String,
}

/// Chat layout: `{"content": [{token, logprob, bytes, top_logprobs: [...]}]}`.
#[derive(Debug, Default, Serialize)]
pub struct ChatLogprobs {
    pub content: Vec<ChatLogprob>,
}

#[derive(Debug, Serialize)]
pub struct ChatLogprob {
    pub token: String,
    pub logprob: f64,
    /// The token text's UTF-8 bytes (a token may hold part of a character).
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopChatLogprob>,
}

#[derive(Debug, Serialize)]
pub struct TopChatLogprob {
    pub token: String,
    pub logprob: f64,
    pub bytes: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::Usage;

    /// The wire order and the nulls clients parse: `logprobs` and `finish_reason` stay as
    /// `null`, unset delta fields and extras are left out, `f32` logprobs go out widened.
    #[test]
    fn a_chunk_serializes_in_openai_order_with_its_nulls() {
        let logprobs = ChatLogprobs {
            content: vec![ChatLogprob {
                token: "a".into(),
                logprob: f64::from(0.1f32),
                bytes: vec![97],
                top_logprobs: vec![],
            }],
        };
        let choice = ChatChunkChoice { logprobs: Some(logprobs), ..ChatChunkChoice::delta(Delta::content("a")) };
        let chunk = Envelope {
            id: "chatcmpl-1".into(),
            object: "chat.completion.chunk",
            created: 7,
            model: "m".into(),
            system_fingerprint: "fp".into(),
            choices: vec![choice, ChatChunkChoice::delta(Delta::default())],
            usage: None,
        };
        let expected = concat!(
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp","#,
            r#""choices":[{"index":0,"delta":{"content":"a"},"logprobs":{"content":[{"token":"a","#,
            r#""logprob":0.10000000149011612,"bytes":[97],"top_logprobs":[]}]},"finish_reason":null},"#,
            r#"{"index":0,"delta":{},"logprobs":null,"finish_reason":null}]}"#
        );
        assert_eq!(serde_json::to_string(&chunk).ok().as_deref(), Some(expected));
        let with_usage = Envelope { usage: Some(Usage::new(5, 2, 3)), choices: Vec::<ChatChunkChoice>::new(), ..chunk };
        let text = serde_json::to_string(&with_usage).unwrap_or_default();
        assert!(
            text.ends_with(r#""choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":2}}}"#),
            "{text}"
        );
    }
}
