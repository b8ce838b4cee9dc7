//! The `/v1/completions` request body: the prompt in its four shapes, completions' own
//! fields, and the fields every endpoint shares (`CommonParams`) flattened in.

use serde::Deserialize;
use serde_json::Value;

use crate::request::protocol::CommonParams;
use crate::response::error::ApiError;
use entrobatch::Prompt;

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

/// One prompt only: batched prompts would need one choice per prompt.
pub fn completion_prompts(prompt: PromptField) -> Result<Vec<Prompt>, ApiError> {
    let prompts: Vec<Prompt> = match prompt {
        PromptField::Text(t) => vec![Prompt::Text(t)],
        PromptField::Ids(ids) => vec![Prompt::TokenIds(ids)],
        PromptField::Texts(v) => v.into_iter().map(Prompt::Text).collect(),
        PromptField::IdLists(v) => v.into_iter().map(Prompt::TokenIds).collect(),
    };
    if prompts.is_empty() {
        return Err(ApiError::invalid_param("prompt", "the prompt list is empty"));
    }
    Ok(prompts)
}
