use entrobatch_model_runner::ChatMessage;
use entrobatch_sampler::SamplingParams;
use serde::{Deserialize, Serialize};

use crate::strategy::Decoding;

/// What the model continues from.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Prompt {
    /// Plain text completion; the tokenizer adds BOS only if the model asks for it.
    Text(String),
    /// Messages rendered through the model's chat template with a generation prompt.
    Chat(Vec<ChatMessage>),
    TokenIds(Vec<u32>),
}

/// Per-request generation settings: the sampler's parameters plus stop conditions.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct GenerationParams {
    pub sampling: SamplingParams,
    pub max_tokens: usize,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    pub ignore_eos: bool,
    /// Chat templates with a thinking switch (Qwen3) read this.
    pub enable_thinking: Option<bool>,
    /// How tokens are chosen: plain sampling or an entropy-aware strategy.
    pub decoding: Decoding,
    /// Attach entropy metrics to every generated token.
    pub return_metrics: bool,
}

impl Default for GenerationParams {
    fn default() -> Self {
        Self {
            sampling: SamplingParams::default(),
            max_tokens: 256,
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            enable_thinking: None,
            decoding: Decoding::default(),
            return_metrics: false,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Request {
    pub prompt: Prompt,
    pub params: GenerationParams,
}

impl Request {
    pub fn new(prompt: Prompt, params: GenerationParams) -> Self {
        Self { prompt, params }
    }
}
