//! The request fields `/v1/completions` and `/v1/chat/completions` share; each endpoint's
//! own body (`CompletionRequest`, `ChatRequest`) lives with its endpoint and flattens these
//! in. Fields are optional so a client sends only what it changes; a known field of the wrong
//! type is a 400, and so is an unknown one unless it cannot change the output
//! (`INERT_FIELDS`): nothing a client sends is silently ignored.

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
    /// `{"include_usage": bool}`, read by `params::include_usage`.
    pub stream_options: Option<Value>,
    /// entrobatch extension: `{"strategy": "plain" | "mti" | ..., ...parameters}`.
    pub decoding: Option<Value>,
    /// entrobatch extension: per-token entropy metrics in `token_metrics`.
    pub return_metrics: Option<bool>,
    /// vLLM extension: generated token ids in `token_ids`.
    pub return_token_ids: Option<bool>,
    /// entrobatch extension: this request's time-to-first-token target in ms (the server's
    /// `--ttft-slo-ms` otherwise); a request the queue would delay past it gets a 429 at once.
    pub ttft_target_ms: Option<u64>,
    /// entrobatch extension: speculative decoding on (`true`: a 400 where the server has no
    /// `--speculative-config` or the strategy cannot speculate) or off for this request; the
    /// server's default otherwise.
    pub speculative: Option<bool>,
    /// OpenAI's Predicted Outputs: `{"type": "content", "content": "..." | [{"type": "text",
    /// "text": "..."}]}`, the output expected mostly, drafted from (`params::parse_prediction`).
    pub prediction: Option<Value>,
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
    /// llama-server: a JSON schema at the top level.
    pub json_schema: Option<Value>,
    /// llama-server: a GBNF grammar.
    pub grammar: Option<String>,
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

/// llama-server's own fields, which only make sense inside llama.cpp or have another name
/// here: refused like any unknown field, with what to send instead.
pub const LLAMA_SERVER_FIELDS: [(&str, &str); 5] = [
    ("id_slot", "there are no slots to pick: every request joins one continuous batch; drop the field"),
    ("cache_prompt", "prompt prefixes are always cached and reused across requests; drop the field"),
    ("n_keep", "a prompt longer than the context is refused, never shifted or truncated; drop the field"),
    ("n_predict", "send `max_tokens`"),
    ("n_probs", "send `logprobs` (completions) or `logprobs` with `top_logprobs` (chat)"),
];

/// The first key of `object` not in `known`: the one check behind every "unknown key" 400
/// inside a request's typed parts.
pub fn unknown_key<'a>(object: &'a serde_json::Map<String, Value>, known: &[&str]) -> Option<&'a str> {
    object.keys().map(String::as_str).find(|k| !known.contains(k))
}
