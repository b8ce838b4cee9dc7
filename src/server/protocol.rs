//! Request bodies of `/v1/completions` and `/v1/chat/completions`. Fields are optional so a
//! client sends only what it changes; unknown fields are ignored; a known field of the wrong
//! type is a 400. Responses are built as JSON values next to their handlers.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

/// `stop`: one string or a list.
#[derive(Debug, Deserialize)]
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

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

/// Parameters both endpoints share.
#[derive(Debug, Default, Deserialize)]
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
}

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
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub suffix: Option<String>,
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
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ChatTemplateKwargs {
    pub enable_thinking: Option<bool>,
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
    /// vLLM's way to pass template switches such as Qwen3's `enable_thinking`.
    #[serde(default)]
    pub chat_template_kwargs: Option<ChatTemplateKwargs>,
    /// Accepted at the top level too, for convenience.
    #[serde(default)]
    pub enable_thinking: Option<bool>,
}
