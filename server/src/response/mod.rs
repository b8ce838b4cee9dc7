//! The bodies the server sends, as typed structs: what a field is, whether it may be `null`
//! and whether it may be left out is written once, on the struct, rather than at each `json!`
//! site. This folder holds the pieces every endpoint shares (the chat and completions
//! envelope, `usage`, the per-token extras, errors) and what builds and sends responses
//! (`format`, `collect`, `stream`, `error`); each endpoint's own bodies live with it.
//!
//! Field order is declaration order, and it is the wire order: keep it as OpenAI writes it.
//! Floats the engine holds as `f32` are sent widened to `f64` (the value the `f32` stands
//! for, digit for digit), as the server always has: `0.1f32` goes out as
//! `0.10000000149011612`, so clients that compare logprobs against `float(f32)` keep matching.

pub mod collect;
pub mod error;
pub mod format;
pub mod stream;

use serde::ser::{Error as _, Serializer};
use serde::Serialize;

use entrobatch::{GeneratedToken, PredictionTokens, TokenMetrics};

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
    /// Present when decoding cost more than the completion (branch continuations not kept) or
    /// the request sent a predicted output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

/// Tokens decoded beyond those in the completion (they are not counted in `completion_tokens`),
/// and how a predicted output fared.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CompletionTokensDetails {
    /// Decoded by the continuations a branching request tried and did not keep.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch_tokens: Option<usize>,
    /// OpenAI's Predicted Outputs: the prediction's tokens verified and kept as output...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted_prediction_tokens: Option<usize>,
    /// ...and those verified and not kept, each a row of a step the completion did not use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected_prediction_tokens: Option<usize>,
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
            completion_tokens_details: None,
        }
    }

    /// Adds a choice's discarded branch tokens, read from its `strategy_stats`.
    pub fn add_branch_tokens(&mut self, strategy_stats: Option<&serde_json::Value>) {
        let tokens = strategy_stats.and_then(|s| s.get("branch_extra_tokens")).and_then(|v| v.as_u64()).unwrap_or(0);
        if tokens > 0 {
            let details = self.completion_tokens_details.get_or_insert_with(Default::default);
            *details.branch_tokens.get_or_insert(0) += tokens as usize;
        }
    }

    /// Adds a choice's predicted-output counts, when it sent a prediction.
    pub fn add_prediction(&mut self, prediction: Option<PredictionTokens>) {
        if let Some(PredictionTokens { accepted, rejected }) = prediction {
            let details = self.completion_tokens_details.get_or_insert_with(Default::default);
            *details.accepted_prediction_tokens.get_or_insert(0) += accepted;
            *details.rejected_prediction_tokens.get_or_insert(0) += rejected;
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

/// The extension fields a choice carries after `finish_reason`: entrobatch's
/// `token_metrics` and vLLM's `token_ids`, each present only when asked for, and
/// `schema_errors`, present when a JSON schema output was checked after decoding (its grammar
/// could not enforce the whole schema): the validator's errors, empty when valid.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TokenExtras {
    /// One entry per token, `null` for a token without metrics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_metrics: Option<Vec<Option<Widened<TokenMetrics>>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_errors: Option<Vec<String>>,
}

impl TokenExtras {
    pub fn new(tokens: &[GeneratedToken], return_metrics: bool, return_token_ids: bool) -> Self {
        Self {
            token_metrics: return_metrics.then(|| tokens.iter().map(|t| t.metrics.clone().map(Widened)).collect()),
            token_ids: return_token_ids.then(|| tokens.iter().map(|t| t.token_id).collect()),
            schema_errors: None,
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

/// Serializes `T` through `serde_json::Value`, which widens its `f32` fields to `f64` (see
/// the module doc of `response`): `0.7f32` goes out as `0.699999988079071`, as it always has.
#[derive(Clone, Debug)]
pub struct Widened<T>(pub T);

impl<T: Serialize> Serialize for Widened<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serde_json::to_value(&self.0).map_err(S::Error::custom)?.serialize(serializer)
    }
}
