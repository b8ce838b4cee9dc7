//! Anthropic Messages API response bodies: the whole message, its content blocks, `usage`,
//! the stream's events, and the error body. Field order is wire order.

use serde::Serialize;
use serde_json::Value;

use crate::response::TokenExtras;

#[derive(Debug, Serialize)]
pub struct Message {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub role: &'static str,
    pub model: String,
    pub content: Vec<ContentBlock>,
    /// `null` only in `message_start`.
    pub stop_reason: Option<&'static str>,
    pub stop_sequence: Option<String>,
    pub usage: Usage,
    /// entrobatch's `token_metrics`, when asked for.
    #[serde(flatten)]
    pub extras: TokenExtras,
}

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text { text: String },
    Thinking { thinking: String, signature: String },
    ToolUse { id: String, name: String, input: Value },
}

/// Anthropic counts prompt tokens read from the cache apart from `input_tokens`.
#[derive(Clone, Debug, Serialize)]
pub struct Usage {
    pub input_tokens: usize,
    pub output_tokens: usize,
    pub cache_creation_input_tokens: usize,
    pub cache_read_input_tokens: usize,
}

impl Usage {
    pub fn new(prompt_tokens: usize, cached_tokens: usize, output_tokens: usize) -> Self {
        Self {
            input_tokens: prompt_tokens.saturating_sub(cached_tokens),
            output_tokens,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: cached_tokens,
        }
    }
}

/// `/v1/messages/count_tokens`.
#[derive(Debug, Serialize)]
pub struct TokenCount {
    pub input_tokens: usize,
}

/// One server-sent event of a streamed message; its `type` is also the SSE event name.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    MessageStart {
        message: Message,
    },
    ContentBlockStart {
        index: usize,
        content_block: ContentBlock,
    },
    Ping,
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: MessageDeltaBody,
        usage: Usage,
        #[serde(flatten)]
        extras: TokenExtras,
    },
    MessageStop,
    Error {
        error: ErrorDetail,
    },
}

impl StreamEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::MessageStart { .. } => "message_start",
            Self::ContentBlockStart { .. } => "content_block_start",
            Self::Ping => "ping",
            Self::ContentBlockDelta { .. } => "content_block_delta",
            Self::ContentBlockStop { .. } => "content_block_stop",
            Self::MessageDelta { .. } => "message_delta",
            Self::MessageStop => "message_stop",
            Self::Error { .. } => "error",
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(tag = "type")]
pub enum BlockDelta {
    #[serde(rename = "text_delta")]
    Text { text: String },
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: String },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
}

#[derive(Debug, Serialize)]
pub struct MessageDeltaBody {
    pub stop_reason: &'static str,
    pub stop_sequence: Option<String>,
}

/// `{"type": "error", "error": {"type", "message"}}`.
#[derive(Debug, Serialize)]
pub struct ErrorBody {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize)]
pub struct ErrorDetail {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: String,
}
