use entrobatch_model_runner::ChatMessage;
use entrobatch_sampler::SamplingParams;
use serde::{Deserialize, Serialize};

use crate::strategy::Decoding;
use crate::structured::StructuredOutput;

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
    /// `Prompt::Chat`: open the assistant's turn after the messages (the template's generation
    /// prompt). Off with `continue_final_message`.
    pub add_generation_prompt: bool,
    /// `Prompt::Chat`: the prompt ends inside the final (assistant) message, so the output
    /// continues it, with no end-of-turn token after it.
    pub continue_final_message: bool,
    /// How tokens are chosen: plain sampling or an entropy-aware strategy.
    pub decoding: Decoding,
    /// Attach entropy metrics to every generated token.
    pub return_metrics: bool,
    /// Constrain the output to a JSON schema, regex, choice or grammar.
    pub structured: Option<StructuredOutput>,
    /// Tool definitions (OpenAI's `tools` list) for the chat template to render; only with
    /// `Prompt::Chat` on a model whose template reads them.
    pub tools: Option<Vec<serde_json::Value>>,
    /// `Prompt::Chat`: further template variables (vLLM's `chat_template_kwargs`), by name.
    /// Names the renderer sets itself (`messages`, `tools`, `enable_thinking`, ...) are refused.
    pub chat_template_kwargs: serde_json::Map<String, serde_json::Value>,
    /// Score the prompt: `Some(k)` sends every prompt token's log-probability (and the `k`
    /// best alternatives of its row) before the output. The prompt is then computed whole,
    /// never served from the prefix cache. With it, `max_tokens` may be 0 (scoring only).
    pub prompt_logprobs: Option<usize>,
    /// This request's own time-to-first-token target in milliseconds, in place of the
    /// engine's (`EngineConfig::latency_targets`): admission refuses it at once if the queue
    /// ahead would delay its first token past it.
    pub ttft_target_ms: Option<u64>,
    /// Speculative decoding for this request: `Some(true)` asks for it (refused where the
    /// engine has no drafter or the strategy cannot speculate), `Some(false)` turns it off,
    /// `None` takes the engine's default (on when it has a drafter and the strategy allows).
    pub speculative: Option<bool>,
    /// The output the client expects, mostly (OpenAI's Predicted Outputs): a file a code edit
    /// returns with a few lines changed, a document answered back with corrections. Drafted
    /// from, so the tokens that repeat it cost a fraction of a step each; the output is what it
    /// would be without it. Asks for speculation as `speculative: Some(true)` does.
    pub prediction: Option<String>,
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
            add_generation_prompt: true,
            continue_final_message: false,
            decoding: Decoding::default(),
            return_metrics: false,
            structured: None,
            tools: None,
            chat_template_kwargs: serde_json::Map::new(),
            prompt_logprobs: None,
            ttft_target_ms: None,
            speculative: None,
            prediction: None,
        }
    }
}

impl GenerationParams {
    /// The output limit the scheduler holds room for: a scoring-only request (`max_tokens` 0)
    /// still runs the row after its prompt, whose token it never samples.
    pub fn scheduled_max_tokens(&self) -> usize {
        self.max_tokens.max(1)
    }

    /// Scoring only: the request ends, `Length`, once its prompt is scored.
    pub fn is_scoring_only(&self) -> bool {
        self.max_tokens == 0 && self.prompt_logprobs.is_some()
    }
}

#[derive(Clone, Debug)]
pub struct Request {
    pub prompt: Prompt,
    pub params: GenerationParams,
    /// Ignore `params.max_tokens` and generate until the context or the KV cache is full:
    /// vLLM's chat default when a client sends no `max_tokens`. `Engine::prepare` resolves it,
    /// since only the engine knows the prompt's length and its own limits.
    pub until_context_full: bool,
}

impl Request {
    pub fn new(prompt: Prompt, params: GenerationParams) -> Self {
        Self { prompt, params, until_context_full: false }
    }

    /// A request whose output may take all the room the prompt leaves.
    pub fn until_context_full(prompt: Prompt, params: GenerationParams) -> Self {
        Self { prompt, params, until_context_full: true }
    }
}
