//! Validation: the one place a request is checked, in the manner of TGI's `Validation`
//! producing a `ValidGenerateRequest`. The `Engine` owns a `Validation`, which holds what
//! checking needs (the tokenizer, the chat template, the model's and the scheduler's limits,
//! the grammar compiler) and turns a `Request` into a `PreparedRequest` the loop trusts:
//! prompt ids inside the vocabulary, a resolved `max_tokens` that fits the context and the KV
//! cache, valid sampling parameters, the request's strategy already built, and its seed.
//! `submit` and the HTTP server both go through it, on the caller's thread, so bad input
//! never reaches the loop.

mod chat_prompt;

use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use entrobatch_model_runner::{ChatTemplate, ModelConfig, Tokenizer};
use entrobatch_sampler::SamplerError;
use entrobatch_scheduler::{NeverFitsReason, SchedulerConfig, SchedulerError};

use crate::error::{EngineError, Result};
use crate::metrics::EngineMetrics;
use crate::request::{GenerationParams, Prompt, Request};
use crate::speculative::{Speculation, SpeculativeConfig};
use crate::strategy::{
    build_strategy, unsupported_sampling, Decoding, SequenceStrategy, StrategyContext, StrategyError,
};
use crate::structured::{Constraint, GrammarLimits, StructuredBackend, StructuredError, StructuredOutput};

/// A request the engine has validated; only `Validation` (through `Engine::prepare`) makes one.
pub struct PreparedRequest {
    pub(crate) prompt_token_ids: Vec<u32>,
    /// `max_tokens` resolved (`Request::until_context_full`) and checked.
    pub(crate) params: GenerationParams,
    pub(crate) strategy: Box<dyn SequenceStrategy>,
    /// The compiled grammar of a structured-output request, at its start state.
    pub(crate) constraint: Option<Constraint>,
    /// The client's seed, or a fresh one: every request runs seeded.
    pub(crate) seed: u64,
    /// Its drafter, when the request speculates.
    pub(crate) speculation: Option<Speculation>,
}

impl PreparedRequest {
    pub fn prompt_token_ids(&self) -> &[u32] {
        &self.prompt_token_ids
    }

    pub fn params(&self) -> &GenerationParams {
        &self.params
    }

    /// Prompt logprobs need every prompt row's logits, so such a prompt is computed whole.
    pub(crate) fn skips_prefix_cache(&self) -> bool {
        self.params.prompt_logprobs.is_some()
    }
}

impl std::fmt::Debug for PreparedRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedRequest")
            .field("prompt_token_ids", &self.prompt_token_ids)
            .field("params", &self.params)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

/// The most alternatives a prompt position reports (OpenAI's and vLLM's logprobs limit).
pub const MAX_PROMPT_LOGPROBS: usize = 20;

/// Checks requests against one engine's model and limits.
pub(crate) struct Validation {
    tokenizer: Arc<Tokenizer>,
    chat_template: ChatTemplate,
    /// The vocabulary, the `[MASK]` id and the rotary table's length.
    model_config: ModelConfig,
    /// The scheduler's limits, for the fit decision (the scheduler's own rule).
    limits: SchedulerConfig,
    /// Handed to each request's strategy, which may update its own counters.
    metrics: Arc<EngineMetrics>,
    /// Bounds on compiling a request's grammar.
    grammar_limits: GrammarLimits,
    /// Built on the first structured-output request: most engines never need the token trie.
    structured: OnceLock<std::result::Result<StructuredBackend, StructuredError>>,
    /// The engine's drafter settings; `None`: no request speculates.
    speculative: Option<SpeculativeConfig>,
}

impl Validation {
    pub(crate) fn new(
        tokenizer: Arc<Tokenizer>,
        chat_template: ChatTemplate,
        model_config: ModelConfig,
        limits: SchedulerConfig,
        grammar_limits: GrammarLimits,
        metrics: Arc<EngineMetrics>,
        speculative: Option<SpeculativeConfig>,
    ) -> Self {
        let structured = OnceLock::new();
        Self { tokenizer, chat_template, model_config, limits, grammar_limits, metrics, structured, speculative }
    }

    pub(crate) fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Whether the chat template renders `tools` (tool calling needs it).
    pub(crate) fn supports_tools(&self) -> bool {
        self.chat_template.supports_tools()
    }

    /// The grammar compiler for this model's vocabulary, built once.
    pub(crate) fn structured_backend(&self) -> std::result::Result<&StructuredBackend, StructuredError> {
        self.structured
            .get_or_init(|| StructuredBackend::new(&self.tokenizer, self.model_config.vocab_size, self.grammar_limits))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Renders a prompt to token ids, checked against the vocabulary.
    pub(crate) fn tokenize_prompt(&self, prompt: &Prompt, params: &GenerationParams) -> Result<Vec<u32>> {
        if params.tools.is_some() && !matches!(prompt, Prompt::Chat(_)) {
            return Err(EngineError::invalid("tools", "tools are rendered by the chat template: send messages"));
        }
        let ids = match prompt {
            Prompt::Text(text) => self.tokenizer.encode(text, true)?,
            Prompt::Chat(messages) => {
                if params.tools.is_some() && !self.chat_template.supports_tools() {
                    return Err(EngineError::invalid(
                        "tools",
                        "this model's chat template cannot render tools (it never reads `tools`); \
                         use a model whose template does, such as Qwen2.5",
                    ));
                }
                let rendered = chat_prompt::render_chat(&self.chat_template, messages, params)?;
                self.tokenizer.encode(&rendered, false)?
            }
            Prompt::TokenIds(ids) => ids.clone(),
        };
        if ids.is_empty() {
            return Err(EngineError::invalid("prompt", "the prompt is empty"));
        }
        let vocab_size = self.model_config.vocab_size;
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(EngineError::invalid(
                "prompt",
                format!("token id {bad} is outside the vocabulary of {vocab_size}"),
            ));
        }
        Ok(ids)
    }

    /// Tokenizes and validates `request` against this engine's model and limits.
    pub(crate) fn validate(&self, request: Request) -> Result<PreparedRequest> {
        let Request { prompt, mut params, until_context_full } = request;
        let prompt_token_ids = self.tokenize_prompt(&prompt, &params)?;
        let num_prompt = prompt_token_ids.len();
        if until_context_full {
            params.max_tokens = self.tokens_left_after(num_prompt);
        }
        params.sampling.validate(self.model_config.vocab_size).map_err(sampling_error)?;
        if params.max_tokens == 0 && params.prompt_logprobs.is_none() {
            return Err(EngineError::invalid(
                "max_tokens",
                "max_tokens must be at least 1 (0 only to score the prompt)",
            ));
        }
        if params.prompt_logprobs.is_some_and(|k| k > MAX_PROMPT_LOGPROBS) {
            let reason = format!("prompt_logprobs must be at most {MAX_PROMPT_LOGPROBS}");
            return Err(EngineError::invalid("prompt_logprobs", reason));
        }
        if params.ttft_target_ms == Some(0) {
            return Err(EngineError::invalid("ttft_target_ms", "a TTFT target must be at least 1 ms"));
        }
        let strategy = self.build_request_strategy(&params)?;
        if let Decoding::Wedlm(_) = params.decoding {
            // Refused rather than silently dropped: the client would get output it did not ask for.
            if let Some((field, reason)) = unsupported_sampling(&params.sampling) {
                return Err(EngineError::invalid(field, reason));
            }
        }
        self.check_fits(num_prompt, &params, strategy.as_ref())?;
        let constraint = params.structured.as_ref().map(|spec| self.compile_constraint(spec, &params)).transpose()?;
        let seed = seed_of(&params);
        let speculation = self.speculation_for(&params)?;
        Ok(PreparedRequest { prompt_token_ids, params, strategy, constraint, seed, speculation })
    }

    /// `validate` for `n` copies of one request (OpenAI's `n`): the prompt is tokenized and
    /// checked once, a structured output's grammar compiled once and a prediction tokenized
    /// once (each copy follows it at its own pace). Copy `i` of a seeded request draws from
    /// `seed + i`; unseeded copies each draw from a fresh seed. `n` of 0 gives one copy, as 1
    /// does.
    pub(crate) fn validate_copies(&self, request: Request, n: usize) -> Result<Vec<PreparedRequest>> {
        let first = self.validate(request)?;
        let mut copies = Vec::with_capacity(n);
        for i in 1..n {
            let mut params = first.params.clone();
            params.sampling.seed = params.sampling.seed.map(|s| s.wrapping_add(i as u64));
            copies.push(PreparedRequest {
                prompt_token_ids: first.prompt_token_ids.clone(),
                strategy: self.build_request_strategy(&params)?,
                constraint: first.constraint.as_ref().map(Constraint::fork),
                seed: seed_of(&params),
                speculation: first.speculation.clone(),
                params,
            });
        }
        copies.insert(0, first);
        Ok(copies)
    }

    /// Whether the request speculates, and its drafter if so. Only plain decoding speculates:
    /// entropix reads the attention of the one row it samples from and changes its sampler
    /// with it, MTI adds rows of its own to a guided token, and WeDLM already decodes windows
    /// in parallel; none has an acceptance rule that keeps its output exact. A predicted
    /// output asks for speculation as `speculative: true` does, and needs no drafter on the
    /// engine: it is its own.
    fn speculation_for(&self, params: &GenerationParams) -> Result<Option<Speculation>> {
        let prediction = self.tokenize_prediction(params)?;
        let field = if prediction.is_some() { "prediction" } else { "speculative" };
        let asked = params.speculative == Some(true) || prediction.is_some();
        if params.speculative == Some(false) {
            if prediction.is_some() {
                let reason = "a predicted output is verified by speculative decoding, which this request \
                              turns off (`speculative: false`); send one of the two";
                return Err(EngineError::invalid("prediction", reason));
            }
            return Ok(None);
        }
        if !matches!(params.decoding, Decoding::Plain) {
            if asked {
                let reason = format!(
                    "the {} strategy cannot speculate (only plain decoding keeps its output exact under speculation)",
                    params.decoding.name()
                );
                return Err(EngineError::invalid(field, reason));
            }
            return Ok(None);
        }
        Ok(match (&self.speculative, prediction) {
            (Some(config), Some(prediction)) => Some(Speculation::new(config).with_prediction(prediction)),
            (Some(config), None) => Some(Speculation::new(config)),
            (None, Some(prediction)) => Some(Speculation::predicted(&SpeculativeConfig::ngram(), prediction)),
            (None, None) if asked => {
                let reason = "this engine has no drafter; start it with --speculative-config";
                return Err(EngineError::invalid("speculative", reason));
            }
            (None, None) => None,
        })
    }

    /// The predicted output's tokens, at most a context long (no output can be longer).
    fn tokenize_prediction(&self, params: &GenerationParams) -> Result<Option<Vec<u32>>> {
        let Some(text) = &params.prediction else { return Ok(None) };
        let token_ids = self.tokenizer.encode(text, false)?;
        let limit = self.limits.max_model_len;
        if token_ids.len() > limit {
            let reason = format!("the prediction is {} tokens, longer than the context ({limit})", token_ids.len());
            return Err(EngineError::invalid("prediction", reason));
        }
        Ok(Some(token_ids))
    }

    /// A fresh decoding strategy for a request with `params` (every copy needs its own state).
    fn build_request_strategy(&self, params: &GenerationParams) -> Result<Box<dyn SequenceStrategy>> {
        let ctx = StrategyContext {
            mask_token_id: self.model_config.mask_token_id,
            max_model_len: self.limits.max_model_len,
            max_tokens: params.scheduled_max_tokens(),
            metrics: Some(self.metrics.clone()),
            ..StrategyContext::new(&self.tokenizer)
        };
        Ok(build_strategy(&params.decoding, &ctx)?)
    }

    fn compile_constraint(&self, spec: &StructuredOutput, params: &GenerationParams) -> Result<Constraint> {
        if let Decoding::Wedlm(_) = params.decoding {
            // A window fills several positions from one forward, each sampled without the
            // tokens before it: no grammar state exists for them.
            return Err(StrategyError::Unsupported {
                strategy: "wedlm",
                reason: "structured outputs need one token at a time; use plain, entropix or mti decoding".into(),
            }
            .into());
        }
        if params.ignore_eos {
            return Err(EngineError::invalid(
                "ignore_eos",
                "ignore_eos cannot be combined with a structured output: the output ends where its grammar does",
            ));
        }
        Ok(self.structured_backend()?.compile(spec)?)
    }

    /// Tokens a request may generate after a prompt of `num_prompt` tokens: what the context
    /// and the whole KV cache leave (at least 1, so an over-long prompt fails the fit check).
    fn tokens_left_after(&self, num_prompt: usize) -> usize {
        let limits = &self.limits;
        limits.max_model_len.min(limits.max_tokens_in_cache()).saturating_sub(num_prompt).max(1)
    }

    /// Whether the request could run even alone in an empty engine; the scheduler's own rule
    /// (`SchedulerConfig::check_fits`), so the two can never disagree.
    fn check_fits(&self, num_prompt: usize, params: &GenerationParams, strategy: &dyn SequenceStrategy) -> Result<()> {
        let limits = &self.limits;
        let scratch = strategy.max_scratch_rows();
        if scratch > 0 && limits.check_scratch_rows(0, scratch).is_err() {
            return Err(StrategyError::config(
                params.decoding.name(),
                format!(
                    "needs {scratch} extra rows in a step beside its token, but max_num_batched_tokens is {}",
                    limits.max_num_batched_tokens
                ),
            )
            .into());
        }
        // Scratch rows sit after the sequence's last token, so they must stay inside the
        // rotary table or the whole batch's forward would fail.
        let past_end = strategy.positions_past_end();
        let positions = self.model_config.max_position_embeddings;
        let needed = num_prompt.saturating_add(params.max_tokens).saturating_add(past_end);
        if past_end > 0 && needed > positions {
            let reason = format!(
                "{}'s extra rows ({past_end} positions) run past the model's positions",
                params.decoding.name()
            );
            return Err(EngineError::NeverFits { needed, limit: positions, reason });
        }
        match limits.check_fits(0, num_prompt, params.scheduled_max_tokens(), 0) {
            Ok(()) => Ok(()),
            Err(SchedulerError::NeverFits { needed_tokens, limit, reason, .. }) => {
                let reason = match reason {
                    NeverFitsReason::MaxModelLen => format!(
                        "prompt ({num_prompt} tokens) plus max_tokens ({}) exceeds the context length",
                        params.max_tokens
                    ),
                    NeverFitsReason::KvCacheCapacity => "more tokens than the whole KV cache holds".into(),
                    NeverFitsReason::TokenBudget => "more rows than one step may run".into(),
                };
                Err(EngineError::NeverFits { needed: needed_tokens, limit, reason })
            }
            Err(other) => Err(other.into()),
        }
    }
}

fn sampling_error(e: SamplerError) -> EngineError {
    match e {
        SamplerError::InvalidParam { field, message } => {
            EngineError::invalid(field, format!("invalid sampling parameter `{field}`: {message}"))
        }
        other => EngineError::invalid("sampling", other.to_string()),
    }
}

/// The seed a request draws from: its own, else a fresh one.
fn seed_of(params: &GenerationParams) -> u64 {
    params.sampling.seed.unwrap_or_else(random_seed)
}

fn random_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    nanos ^ COUNTER.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}
