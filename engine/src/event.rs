use serde::{Deserialize, Serialize};

pub type RequestId = u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    Stop,
    Length,
    Abort,
    Error,
}

impl FinishReason {
    /// Every reason, in `index` order (the metrics keep one counter per reason).
    pub const ALL: [FinishReason; 4] = [Self::Stop, Self::Length, Self::Abort, Self::Error];

    /// Position in `ALL`.
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::Abort => "abort",
            Self::Error => "error",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    pub token_id: u32,
    pub logprob: f32,
    pub top_logprobs: Vec<(u32, f32)>,
}

/// One prompt token's log-probability given the tokens before it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PromptLogprob {
    pub token_id: u32,
    pub logprob: f32,
    /// 1 for the most likely token of the row.
    pub rank: u32,
    pub top_logprobs: Vec<(u32, f32)>,
}

/// Uncertainty of the distribution a token was drawn from, and what the strategy did.
/// Logit entropy is in bits (the entropix convention); MTI triggers on nats internally.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenMetrics {
    pub entropy: f32,
    pub varentropy: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention: Option<entrobatch_model_runner::AttnMetrics>,
    /// The entropix branch taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Whether MTI guidance fired for this token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guided: Option<bool>,
    /// The engine branched before this token: what it tried and why it kept this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<BranchReport>,
}

/// A branch point as the per-token metrics show it (`Decoding::Branch`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BranchReport {
    /// Continuations tried, the plain draw's included.
    pub tried: usize,
    /// The candidate whose continuation was kept (0: the plain draw).
    pub kept: usize,
    pub scorer: entrobatch_sampler::BranchScorer,
    /// Each continuation's score, in candidate order.
    pub scores: Vec<f32>,
    /// Tokens each continuation decoded.
    pub lengths: Vec<usize>,
    /// Of the distribution at the branch point, in bits and bits squared.
    pub entropy: f32,
    pub varentropy: f32,
}

/// One generated token and what the sampler knew about it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GeneratedToken {
    pub token_id: u32,
    pub logprob: Option<TokenLogprob>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<TokenMetrics>,
}

/// What a request's stream carries, in order: `PromptLogprobs` (only when asked, prompt
/// positions 1.. in order, before any token), any number of `Tokens` (one for each step that
/// gave the request tokens: several where a draft was verified or a branch settled), then one
/// `Finished`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Event {
    PromptLogprobs(Vec<PromptLogprob>),
    Tokens {
        tokens: Vec<GeneratedToken>,
        /// Text delta, decoded incrementally; never splits a UTF-8 character.
        text: String,
    },
    Finished {
        reason: FinishReason,
        prompt_tokens: usize,
        /// Prompt tokens served from the prefix cache.
        cached_tokens: usize,
        completion_tokens: usize,
        /// Why the request failed, for `FinishReason::Error`.
        error: Option<String>,
        /// The decoding strategy's per-request statistics (MTI trigger rate, entropix branch
        /// counts, WeDLM tokens per forward); `None` for plain decoding.
        strategy_stats: Option<serde_json::Value>,
        /// The stop string (`GenerationParams::stop`) that ended the output; `None` when it
        /// ended any other way (EOS, a stop token id, the length limit).
        #[serde(default)]
        stop_string: Option<String>,
        /// A JSON schema output whose grammar does not enforce the whole schema
        /// (`StructuredOutput::JsonSchema`), ended by its grammar: the validator's errors
        /// against the whole schema, empty when valid. `None` when nothing was checked.
        #[serde(default)]
        schema_errors: Option<Vec<String>>,
        /// How the request's predicted output (`GenerationParams::prediction`) fared as
        /// drafts; `None` when it sent none.
        #[serde(default)]
        prediction: Option<PredictionTokens>,
    },
}

/// Draft tokens taken from a predicted output that verification kept, and that it tried and
/// threw away (OpenAI's `accepted_prediction_tokens` and `rejected_prediction_tokens`; the
/// rejected ones cost a row of a step each and are not in the output).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PredictionTokens {
    pub accepted: usize,
    pub rejected: usize,
}

impl From<FinishReason> for entrobatch_scheduler::FinishReason {
    fn from(reason: FinishReason) -> Self {
        match reason {
            FinishReason::Stop => Self::Stop,
            FinishReason::Length => Self::Length,
            FinishReason::Abort => Self::Abort,
            FinishReason::Error => Self::Error,
        }
    }
}
