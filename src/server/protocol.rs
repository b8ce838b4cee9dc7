//! Request bodies of `/v1/completions` and `/v1/chat/completions`. Fields are optional so a
//! client sends only what it changes; a known field of the wrong type is a 400, and so is an
//! unknown one unless it cannot change the output (`INERT_FIELDS`): nothing a client sends is
//! silently ignored. Response bodies are typed structs in `response/`.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `stop`: one string or a list.
#[derive(Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum StopField {
    One(String),
    Many(Vec<String>),
}

impl StopField {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

/// Parameters both endpoints share. `Serialize` lists their names (`common_field_names`).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct CommonParams {
    pub model: Option<String>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub seed: Option<i64>,
    pub stop: Option<StopField>,
    /// vLLM extension.
    pub stop_token_ids: Option<Vec<u32>>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub logit_bias: Option<HashMap<String, f32>>,
    pub n: Option<i64>,
    pub best_of: Option<i64>,
    /// vLLM extension: generate exactly `max_tokens` tokens.
    pub ignore_eos: Option<bool>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    /// entrobatch extension: `{"strategy": "plain" | "mti" | ..., ...parameters}`.
    pub decoding: Option<Value>,
    /// entrobatch extension: per-token entropy metrics in `token_metrics`.
    pub return_metrics: Option<bool>,
    /// vLLM extension: generated token ids in `token_ids`.
    pub return_token_ids: Option<bool>,
    #[serde(flatten)]
    pub structured: StructuredFields,
}

/// Every way a client may ask for structured output (see `structured.rs`).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct StructuredFields {
    /// OpenAI: `{"type": "text" | "json_object" | "json_schema", ...}`.
    pub response_format: Option<Value>,
    /// vLLM: `{"json" | "regex" | "choice" | "grammar" | "json_object": ...}`.
    pub structured_outputs: Option<Value>,
    /// vLLM's older names for the same.
    pub guided_json: Option<Value>,
    pub guided_regex: Option<String>,
    pub guided_choice: Option<Vec<String>>,
    pub guided_grammar: Option<String>,
}

/// The JSON names of `CommonParams`' fields (flattened ones included), read from its own
/// serde derive so the list cannot drift from the struct.
pub fn common_field_names() -> &'static [String] {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| match serde_json::to_value(CommonParams::default()) {
        Ok(Value::Object(map)) => map.into_iter().map(|(k, _)| k).collect(),
        _ => Vec::new(),
    })
}

/// Top-level fields accepted although they do not change the output (OpenAI bookkeeping).
pub const INERT_FIELDS: [&str; 6] =
    ["user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"];

/// `prompt`: text, one-element text list, token ids, or one-element list of token-id lists.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum PromptField {
    Text(String),
    Ids(Vec<u32>),
    Texts(Vec<String>),
    IdLists(Vec<Vec<u32>>),
}

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    #[serde(flatten)]
    pub common: CommonParams,
    pub prompt: PromptField,
    /// Number of top logprobs per token (0..=20).
    #[serde(default)]
    pub logprobs: Option<i64>,
    /// Return the prompt ahead of the output (with `logprobs`, its tokens' logprobs too).
    #[serde(default)]
    pub echo: Option<bool>,
    /// vLLM: the log-probabilities of the prompt's tokens, with this many alternatives each.
    #[serde(default)]
    pub prompt_logprobs: Option<i64>,
    #[serde(default)]
    pub suffix: Option<String>,
    /// Every field not named directly above: `CommonParams`' and unknown ones; the unknown
    /// are refused unless inert (`INERT_FIELDS`).
    #[serde(flatten)]
    pub unknown: serde_json::Map<String, Value>,
}

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
