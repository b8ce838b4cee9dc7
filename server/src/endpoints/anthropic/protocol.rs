//! Anthropic Messages API request bodies (`/v1/messages`, `/v1/messages/count_tokens`), as
//! the `anthropic` SDK sends them. Every struct refuses unknown keys by their path;
//! `cache_control` is accepted wherever Anthropic allows it and has no effect, since prompt
//! prefixes are always cached here.

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessagesRequest {
    pub model: String,
    pub messages: Vec<MessageParam>,
    /// Required by `/v1/messages`; `count_tokens` takes none.
    #[serde(default)]
    pub max_tokens: Option<i64>,
    #[serde(default)]
    pub system: Option<SystemField>,
    #[serde(default)]
    pub stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub top_k: Option<i64>,
    #[serde(default)]
    pub tools: Option<Vec<ToolParam>>,
    #[serde(default)]
    pub tool_choice: Option<ToolChoiceParam>,
    #[serde(default)]
    pub thinking: Option<ThinkingParam>,
    /// Structured output: `{"format": {"type": "json_schema", "schema": {...}}}`.
    #[serde(default)]
    pub output_config: Option<OutputConfig>,
    /// Prompt caching hints: prefixes are always cached here.
    #[serde(default, rename = "cache_control")]
    _cache_control: Option<IgnoredAny>,
    /// `{"user_id": ...}`: bookkeeping that cannot change the output.
    #[serde(default, rename = "metadata")]
    _metadata: Option<IgnoredAny>,
    #[serde(default, rename = "service_tier")]
    _service_tier: Option<IgnoredAny>,
    /// entrobatch extension (`extra_body`): `{"strategy": ..., ...}` as in the OpenAI routes.
    #[serde(default)]
    pub decoding: Option<Value>,
    /// entrobatch extension: per-token entropy metrics in `token_metrics`.
    #[serde(default)]
    pub return_metrics: Option<bool>,
    /// entrobatch extension: this request's TTFT target in ms, as on the OpenAI routes.
    #[serde(default)]
    pub ttft_target_ms: Option<u64>,
    /// entrobatch extension: speculative decoding on or off, as on the OpenAI routes.
    #[serde(default)]
    pub speculative: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageParam {
    pub role: String,
    /// A string, or a list of content blocks (read one by one into [`Block`], so an error
    /// names the block).
    pub content: Value,
}

/// `system`: a string or a list of text blocks.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum SystemField {
    Text(String),
    Blocks(Vec<TextBlock>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextBlock {
    #[serde(rename = "type")]
    _kind: TextType,
    pub text: String,
    #[serde(default, rename = "cache_control")]
    _cache_control: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextType {
    Text,
}

/// A content block of a message this server can render (images and documents are refused
/// before a block is read, by their `type`).
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Block {
    Text {
        text: String,
        #[serde(default, rename = "cache_control")]
        _cache_control: Option<IgnoredAny>,
        /// Sources of a returned text block sent back as is: provenance, not prompt text.
        #[serde(default, rename = "citations")]
        _citations: Option<IgnoredAny>,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
        #[serde(default, rename = "cache_control")]
        _cache_control: Option<IgnoredAny>,
        /// Response-only fields of a returned `tool_use` block sent back as is (the SDK's
        /// `model_dump()` keeps them): who made the call, and the toolset it came from.
        #[serde(default, rename = "caller")]
        _caller: Option<IgnoredAny>,
        #[serde(default, rename = "toolset_name")]
        _toolset_name: Option<IgnoredAny>,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default)]
        content: Option<Value>,
        #[serde(default)]
        is_error: Option<bool>,
        #[serde(default, rename = "cache_control")]
        _cache_control: Option<IgnoredAny>,
    },
    /// Earlier turns' thinking: Anthropic strips it from the context, and so does this server.
    Thinking {
        #[serde(rename = "thinking")]
        _thinking: IgnoredAny,
        #[serde(default, rename = "signature")]
        _signature: Option<IgnoredAny>,
    },
    RedactedThinking {
        #[serde(rename = "data")]
        _data: IgnoredAny,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolParam {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub input_schema: Value,
    /// The input must match `input_schema` also under `tool_choice: auto`.
    #[serde(default)]
    pub strict: Option<bool>,
    /// Only `custom` (a client tool); Anthropic's server tools (`web_search_...`) run on
    /// Anthropic's side.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default, rename = "cache_control")]
    _cache_control: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolChoiceParam {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub disable_parallel_tool_use: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ThinkingParam {
    Enabled {
        budget_tokens: i64,
    },
    /// The model decides whether and how much to think.
    Adaptive {},
    Disabled {},
}

/// `output_config`: only `format` (structured output); `effort` has no meaning here.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    #[serde(default)]
    pub format: Option<OutputFormat>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum OutputFormat {
    JsonSchema { schema: Value },
}
