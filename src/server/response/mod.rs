//! The bodies the server sends, as typed structs: what a field is, whether it may be `null`
//! and whether it may be left out is written once here rather than at each `json!` site.
//!
//! Field order is declaration order, and it is the wire order: keep it as OpenAI writes it.
//! Floats the engine holds as `f32` are sent widened to `f64` (the value the `f32` stands
//! for, digit for digit), as the server always has: `0.1f32` goes out as
//! `0.10000000149011612`, so clients that compare logprobs against `float(f32)` keep matching.
//!
//! Chat and completions bodies have their own files; the shared pieces (`usage`, the
//! per-token extras) and the small bodies of the other routes and of errors are here.

mod chat;
mod completion;

pub use chat::{
    ChatChoice, ChatChunkChoice, ChatCompletion, ChatCompletionChunk, ChatLogprob, ChatLogprobs, Delta, FunctionCall,
    FunctionDelta, ResponseMessage, ToolCall, ToolCallDelta, TopChatLogprob,
};
pub use completion::{
    Completion, CompletionChoice, CompletionChunk, CompletionLogprobs, PromptLogprobEntry, PromptLogprobMap,
};

use serde::ser::{Error as _, Serializer};
use serde::Serialize;

use crate::server::GenerationDefaults;
use crate::{GeneratedToken, TokenMetrics};

/// The frame of every chat and completions body, whole or streamed: who answered, when,
/// the choices, and `usage`.
#[derive(Debug, Serialize)]
pub struct Envelope<C> {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<C>,
    /// Always there on a whole response; in a stream only on the last chunk (which has no
    /// choices), when the request asked for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// `usage` of a response or of the final stream chunk.
#[derive(Clone, Debug, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

#[derive(Clone, Debug, Serialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_tokens: usize,
}

impl Usage {
    pub fn new(prompt_tokens: usize, cached_tokens: usize, completion_tokens: usize) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: PromptTokensDetails { cached_tokens },
        }
    }

    /// Adds one choice's counts (a response with several choices reports their sum).
    pub fn add(&mut self, prompt_tokens: usize, cached_tokens: usize, completion_tokens: usize) {
        self.prompt_tokens += prompt_tokens;
        self.completion_tokens += completion_tokens;
        self.total_tokens += prompt_tokens + completion_tokens;
        self.prompt_tokens_details.cached_tokens += cached_tokens;
    }
}

/// The per-token extension fields a choice carries after `finish_reason`: entrobatch's
/// `token_metrics` and vLLM's `token_ids`, each present only when asked for.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TokenExtras {
    /// One entry per token, `null` for a token without metrics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_metrics: Option<Vec<Option<Widened<TokenMetrics>>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
}

impl TokenExtras {
    pub fn new(tokens: &[GeneratedToken], return_metrics: bool, return_token_ids: bool) -> Self {
        Self {
            token_metrics: return_metrics.then(|| tokens.iter().map(|t| t.metrics.clone().map(Widened)).collect()),
            token_ids: return_token_ids.then(|| tokens.iter().map(|t| t.token_id).collect()),
        }
    }
}

/// `{"error": {...}}`, also sent as an SSE `data:` line when a stream fails midway.
#[derive(Debug, Serialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The offending field, `null` when none is to blame.
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

/// The served model (`GET /v1/models`, `GET /v1/models/{id}`).
#[derive(Debug, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    pub max_model_len: usize,
    /// The sampling defaults in force for fields a request leaves out.
    pub generation_defaults: Widened<GenerationDefaults>,
}

#[derive(Debug, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

#[derive(Debug, Serialize)]
pub struct TokenizeResponse {
    pub count: usize,
    pub max_model_len: usize,
    pub tokens: Vec<u32>,
    /// `null` unless `return_token_strs`.
    pub token_strs: Option<Vec<String>>,
}

#[derive(Debug, Serialize)]
pub struct DetokenizeResponse {
    pub prompt: String,
}

/// `/health` and `/ready`; the load fields only on `/ready`, the bound only when there is one.
#[derive(Debug, Serialize)]
pub struct Health {
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct PlaygroundInfo {
    pub model: String,
    pub max_model_len: usize,
    /// WeDLM fills `[MASK]` windows; an ordinary checkpoint has no mask token and the engine
    /// would reject the request, so the page greys the option out instead.
    pub wedlm: bool,
    /// Without one the chat endpoint falls back to ChatML, which may not be what the model
    /// was trained on; the page says so next to its chat switch.
    pub chat_template: bool,
}

/// Serializes `T` through `serde_json::Value`, which widens its `f32` fields to `f64` (see
/// the module doc of `response`): `0.7f32` goes out as `0.699999988079071`, as it always has.
#[derive(Clone, Debug)]
pub struct Widened<T>(pub T);

impl<T: Serialize> Serialize for Widened<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serde_json::to_value(&self.0).map_err(S::Error::custom)?.serialize(serializer)
    }
}
