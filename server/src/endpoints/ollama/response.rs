//! Ollama's response bodies: the chat and generate chunks (a whole response is one chunk with
//! `done: true`), the model listing and card, and the error body. Field order is wire order.

use serde::Serialize;
use serde_json::Value;

use crate::endpoints::chat::ChatLogprob;
use crate::response::TokenExtras;

#[derive(Debug, Serialize)]
pub struct Chunk {
    pub model: String,
    pub created_at: String,
    #[serde(flatten)]
    pub body: ChunkBody,
    pub done: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub done_reason: Option<&'static str>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Stats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<ChatLogprob>>,
    #[serde(flatten)]
    pub extras: TokenExtras,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum ChunkBody {
    Chat {
        message: OutMessage,
    },
    Generate {
        response: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        thinking: Option<String>,
    },
}

#[derive(Debug, Default, Serialize)]
pub struct OutMessage {
    pub role: &'static str,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<OutToolCall>>,
}

#[derive(Debug, Serialize)]
pub struct OutToolCall {
    pub id: String,
    pub function: OutFunction,
}

#[derive(Debug, Serialize)]
pub struct OutFunction {
    pub index: usize,
    pub name: String,
    /// An object, as Ollama sends it.
    pub arguments: Value,
}

/// Counts and durations (nanoseconds) on the final chunk.
#[derive(Debug, Serialize)]
pub struct Stats {
    pub total_duration: u64,
    pub load_duration: u64,
    pub prompt_eval_count: usize,
    pub prompt_eval_duration: u64,
    pub eval_count: usize,
    pub eval_duration: u64,
}

/// `GET /api/tags` and `GET /api/ps`.
#[derive(Debug, Serialize)]
pub struct ModelList {
    pub models: Vec<ModelEntry>,
}

#[derive(Debug, Serialize)]
pub struct ModelEntry {
    pub name: String,
    pub model: String,
    pub modified_at: String,
    pub digest: String,
    pub details: Details,
    /// `/api/ps` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_length: Option<usize>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Details {
    pub parent_model: &'static str,
    pub format: &'static str,
    pub family: &'static str,
    pub families: Vec<&'static str>,
}

/// `POST /api/show`.
#[derive(Debug, Serialize)]
pub struct ShowResponse {
    pub modified_at: String,
    pub details: Details,
    pub model_info: serde_json::Map<String, Value>,
    pub capabilities: Vec<&'static str>,
}

#[derive(Debug, Serialize)]
pub struct VersionResponse {
    pub version: &'static str,
}

/// `{"error": "..."}`, also a stream's last line when it fails midway.
#[derive(Debug, Serialize)]
pub struct ErrorBody {
    pub error: String,
}
