//! The `/v1/chat/completions` request body: the messages (also what `/tokenize` renders),
//! chat's own fields (thinking, tools, continuation), and the fields every endpoint shares
//! (`CommonParams`) flattened in.

use serde::Deserialize;
use serde_json::Value;

use crate::request::protocol::CommonParams;

/// A message's `content`: a string or a list of parts (only `text` parts are supported).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ContentField {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
    /// Any other key: a text part has none, so each is refused by its path.
    #[serde(flatten)]
    pub other: serde_json::Map<String, Value>,
}

#[derive(Debug, Deserialize)]
pub struct MessageIn {
    pub role: String,
    #[serde(default)]
    pub content: Option<ContentField>,
    /// An assistant turn's calls, as OpenAI returned them.
    #[serde(default)]
    pub tool_calls: Option<Vec<Value>>,
    /// A `tool` message answers this call.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// Every other key, handed to the chat template with the message (vLLM's behaviour).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    #[serde(flatten)]
    pub common: CommonParams,
    pub messages: Vec<MessageIn>,
    #[serde(default)]
    pub logprobs: Option<bool>,
    #[serde(default)]
    pub top_logprobs: Option<i64>,
    /// vLLM: variables for the chat template, such as Qwen3's `enable_thinking`; every key
    /// becomes a template variable.
    #[serde(default)]
    pub chat_template_kwargs: Option<serde_json::Map<String, Value>>,
    /// Accepted at the top level too, for convenience.
    #[serde(default)]
    pub enable_thinking: Option<bool>,
    /// OpenAI tool calling: `[{"type": "function", "function": {...}}]`.
    #[serde(default)]
    pub tools: Option<Value>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// vLLM: open the assistant's turn after the messages (default true).
    #[serde(default)]
    pub add_generation_prompt: Option<bool>,
    /// vLLM: continue the final assistant message instead of opening a new turn.
    #[serde(default)]
    pub continue_final_message: Option<bool>,
    /// vLLM: when the last message is an assistant's, its content is returned in front of
    /// the generated text (the whole message when continuing it).
    #[serde(default)]
    pub echo: Option<bool>,
    /// Every field not named directly above: `CommonParams`' and unknown ones; the unknown
    /// are refused unless inert (`INERT_FIELDS`).
    #[serde(flatten)]
    pub unknown: serde_json::Map<String, Value>,
}

impl MessageIn {
    /// A message with this content and nothing else (what the other dialects' converters build).
    pub fn new(role: &str, content: ContentField) -> Self {
        Self {
            role: role.into(),
            content: Some(content),
            tool_calls: None,
            tool_call_id: None,
            name: None,
            extra: Default::default(),
        }
    }
}

impl ChatRequest {
    /// A request with these shared fields and messages, every chat-only field left out.
    pub fn new(common: CommonParams, messages: Vec<MessageIn>) -> Self {
        Self {
            common,
            messages,
            logprobs: None,
            top_logprobs: None,
            chat_template_kwargs: None,
            enable_thinking: None,
            tools: None,
            tool_choice: None,
            parallel_tool_calls: None,
            add_generation_prompt: None,
            continue_final_message: None,
            echo: None,
            unknown: serde_json::Map::new(),
        }
    }
}
