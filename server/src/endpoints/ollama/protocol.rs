//! Ollama's request bodies (`/api/chat`, `/api/generate`, `/api/show`) as its clients send
//! them. Unknown keys are refused by their path, as on every route; `keep_alive` and the
//! load-time `options` configure Ollama's model loading, which has no counterpart here, and
//! are accepted without effect (the README's compatibility table lists them).

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatBody {
    pub model: String,
    #[serde(default)]
    pub messages: Vec<OllamaMessage>,
    #[serde(default)]
    pub tools: Option<Value>,
    /// Ollama streams unless told not to.
    #[serde(default)]
    pub stream: Option<bool>,
    /// `"json"`, `""`, or a JSON schema.
    #[serde(default)]
    pub format: Option<Value>,
    #[serde(default)]
    pub options: Option<Options>,
    #[serde(default)]
    pub think: Option<Value>,
    #[serde(default)]
    pub logprobs: Option<bool>,
    #[serde(default)]
    pub top_logprobs: Option<i64>,
    #[serde(default, rename = "keep_alive")]
    _keep_alive: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OllamaMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<String>,
    /// An assistant turn's thinking, handed to the chat template as any extra key is.
    #[serde(default)]
    pub thinking: Option<String>,
    #[serde(default)]
    pub images: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_calls: Option<Vec<OllamaToolCall>>,
    /// A tool message: the tool that produced it.
    #[serde(default)]
    pub tool_name: Option<String>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OllamaToolCall {
    #[serde(default)]
    pub id: Option<String>,
    pub function: OllamaFunction,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OllamaFunction {
    #[serde(default, rename = "index")]
    _index: Option<IgnoredAny>,
    pub name: String,
    /// An object (Ollama's way); a JSON string is taken too.
    pub arguments: Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateBody {
    pub model: String,
    #[serde(default)]
    pub prompt: Option<String>,
    #[serde(default)]
    pub system: Option<String>,
    /// The prompt is sent as is, without the chat template.
    #[serde(default)]
    pub raw: Option<bool>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub format: Option<Value>,
    #[serde(default)]
    pub options: Option<Options>,
    #[serde(default)]
    pub think: Option<Value>,
    #[serde(default)]
    pub logprobs: Option<bool>,
    #[serde(default)]
    pub top_logprobs: Option<i64>,
    /// Refused with what to do instead (see `convert`).
    #[serde(default)]
    pub suffix: Option<String>,
    #[serde(default)]
    pub template: Option<String>,
    #[serde(default)]
    pub context: Option<Vec<u32>>,
    #[serde(default)]
    pub images: Option<Vec<Value>>,
    #[serde(default, rename = "keep_alive")]
    _keep_alive: Option<IgnoredAny>,
}

/// `options`: Ollama's sampling settings, and entrobatch's `decoding` and `return_metrics`
/// (the one free-form object Ollama's clients pass through).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_k: Option<i64>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub min_p: Option<f32>,
    #[serde(default)]
    pub seed: Option<i64>,
    /// -1: until the context is full; -2: the same here (Ollama: fill the context).
    #[serde(default)]
    pub num_predict: Option<i64>,
    #[serde(default)]
    pub stop: Option<Vec<String>>,
    #[serde(default)]
    pub repeat_penalty: Option<f32>,
    #[serde(default)]
    pub presence_penalty: Option<f32>,
    #[serde(default)]
    pub frequency_penalty: Option<f32>,
    /// Samplers this server does not have: accepted only at their neutral values.
    #[serde(default)]
    pub typical_p: Option<f32>,
    #[serde(default)]
    pub tfs_z: Option<f32>,
    #[serde(default)]
    pub mirostat: Option<i64>,
    #[serde(default)]
    pub mirostat_tau: Option<f32>,
    #[serde(default)]
    pub mirostat_eta: Option<f32>,
    #[serde(default)]
    pub repeat_last_n: Option<i64>,
    #[serde(default)]
    pub penalize_newline: Option<bool>,
    #[serde(default)]
    pub num_keep: Option<i64>,
    /// entrobatch extension: `{"strategy": ..., ...}` as in the OpenAI routes.
    #[serde(default)]
    pub decoding: Option<Value>,
    /// entrobatch extension: per-token entropy metrics in `token_metrics`.
    #[serde(default)]
    pub return_metrics: Option<bool>,
    // Load-time settings of Ollama's runner: the server's own configuration decides these.
    #[serde(default, rename = "num_ctx")]
    _num_ctx: Option<IgnoredAny>,
    #[serde(default, rename = "num_batch")]
    _num_batch: Option<IgnoredAny>,
    #[serde(default, rename = "num_gpu")]
    _num_gpu: Option<IgnoredAny>,
    #[serde(default, rename = "main_gpu")]
    _main_gpu: Option<IgnoredAny>,
    #[serde(default, rename = "num_thread")]
    _num_thread: Option<IgnoredAny>,
    #[serde(default, rename = "numa")]
    _numa: Option<IgnoredAny>,
    #[serde(default, rename = "low_vram")]
    _low_vram: Option<IgnoredAny>,
    #[serde(default, rename = "f16_kv")]
    _f16_kv: Option<IgnoredAny>,
    #[serde(default, rename = "use_mmap")]
    _use_mmap: Option<IgnoredAny>,
    #[serde(default, rename = "use_mlock")]
    _use_mlock: Option<IgnoredAny>,
    #[serde(default, rename = "vocab_only")]
    _vocab_only: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShowBody {
    /// Ollama's clients send `model`; older ones `name`.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, rename = "verbose")]
    _verbose: Option<IgnoredAny>,
}
