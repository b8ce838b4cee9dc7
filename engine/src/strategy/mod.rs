//! Per-sequence decoding strategies. Each live request owns one `SequenceStrategy`; the
//! engine loop asks it which extra rows its sequence adds to the next forward, which rows
//! need logits, and what to do with them. Plain, entropix, MTI and WeDLM differ only here.

mod branch;
mod entropix;
mod error;
mod mti;
mod plain;
mod wedlm;
mod wedlm_config;

use entrobatch_model_runner::AttnMetrics;
use entrobatch_sampler::{SamplingParams, TokenMask};
use serde::{Deserialize, Serialize};

use crate::event::GeneratedToken;
pub use branch::{BranchConfig, BranchOutcome, BranchStrategy, ForkPoint, MAX_BRANCH_K, MAX_BRANCH_LOOKAHEAD};
pub use entrobatch_sampler::entropix::EntropixConfig;
pub use entropix::{find_pause_token, EntropixStrategy, PAUSE_TOKEN_TEXTS};
pub use error::StrategyError;
pub use mti::{MtiConfig, MtiStrategy, TriggerStats};
pub use plain::{logit_metrics, PlainStrategy};
pub use wedlm::WedlmStrategy;
pub use wedlm_config::{unsupported_sampling, WedlmConfig, WEDLM_DEFAULT_TEMPERATURE};

/// The decoding strategy a request asks for, with its parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "strategy", rename_all = "lowercase")]
pub enum Decoding {
    #[default]
    Plain,
    /// Entropix v1 adaptive sampling from logit and attention entropy.
    Entropix(EntropixConfig),
    /// Entropy-triggered classifier-free guidance (MTI).
    Mti(MtiConfig),
    /// WeDLM streaming parallel decoding of mask windows (needs a WeDLM checkpoint).
    Wedlm(WedlmConfig),
    /// Entropy-triggered branching: try a few continuations where the model is unsure, keep one.
    Branch(BranchConfig),
}

impl Decoding {
    /// The strategy's name as clients write it in `{"strategy": ...}`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Entropix(_) => "entropix",
            Self::Mti(_) => "mti",
            Self::Wedlm(_) => "wedlm",
            Self::Branch(_) => "branch",
        }
    }
}

/// A row this sequence adds to the forward after its scheduled token rows, inside its own
/// span: it attends to the context and causally to the rows before it, and its K/V is
/// never persisted (slot -1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScratchRow {
    pub token_id: u32,
    pub position: u32,
}

/// What the engine knows about a sequence when it builds its span.
pub struct SpanPlan<'a> {
    /// Tokens whose K/V is already cached.
    pub context_len: usize,
    /// The scheduled token rows (prefill chunk, decode token, committed WeDLM tokens).
    pub token_ids: &'a [u32],
    /// Scratch rows the scheduler granted this step.
    pub scratch_rows: usize,
    /// The scheduled rows complete the sequence's known tokens, so its last row may sample.
    pub needs_sample: bool,
}

/// The forward's results for one sequence's span.
pub struct StrategyInput<'a> {
    /// Logits of the rows `logits_rows` asked for, in that order.
    pub logits: Vec<&'a [f32]>,
    pub attn_metrics: Option<AttnMetrics>,
    pub prompt_token_ids: &'a [u32],
    pub output_token_ids: &'a [u32],
    pub sampling: &'a SamplingParams,
    pub seed: u64,
    /// The request asked for per-token metrics.
    pub return_metrics: bool,
    /// The tokens a structured-output grammar allows next; strategies draw only among them
    /// (metrics such as entropy stay on the raw distribution: they describe the model).
    pub mask: Option<&'a TokenMask>,
}

/// What a strategy decided this step.
#[derive(Debug, Default)]
pub struct StrategyOutput {
    /// Tokens to append to the sequence, in order (zero, one, or a WeDLM commit run).
    pub tokens: Vec<GeneratedToken>,
    /// Scratch rows to schedule for this sequence next step.
    pub next_scratch_rows: usize,
    /// Continuations to try before the next token is decided (`BranchStrategy`); the engine
    /// keeps `tokens` when it has no room to branch.
    pub fork: Option<ForkPoint>,
}

pub trait SequenceStrategy: Send {
    /// Extra rows after the scheduled token rows of this step's span.
    fn scratch_rows(&mut self, _plan: &SpanPlan<'_>) -> Vec<ScratchRow> {
        Vec::new()
    }

    fn wants_attn_metrics(&self) -> bool {
        false
    }

    /// The cache size those metrics are computed over, empty slots scoring 0 (entropix's
    /// `attention_pad_to`); `None`: the keys that exist.
    fn attn_pad_to(&self) -> Option<usize> {
        None
    }

    /// Rows of the span (token rows then scratch rows, 0-based) whose logits `process` needs.
    fn logits_rows(&self, plan: &SpanPlan<'_>, num_scratch: usize) -> Vec<usize> {
        let _ = num_scratch;
        if plan.needs_sample && !plan.token_ids.is_empty() {
            vec![plan.token_ids.len() - 1]
        } else {
            Vec::new()
        }
    }

    fn process(&mut self, input: StrategyInput<'_>) -> Result<StrategyOutput, StrategyError>;

    /// The sequence was preempted: drop state tied to its KV (a WeDLM window, pending MTI rows).
    fn on_preempted(&mut self) {}

    /// The most scratch rows one step of this sequence may carry beside its token.
    fn max_scratch_rows(&self) -> usize {
        0
    }

    /// Positions past the sequence's last token that scratch rows may take.
    fn positions_past_end(&self) -> usize {
        0
    }

    /// How a branch point this strategy named went (`StrategyOutput::fork`).
    fn on_branch(&mut self, _outcome: BranchOutcome) {}

    /// Strategy statistics for the request's final report (e.g. MTI trigger rate).
    fn summary(&self) -> Option<serde_json::Value> {
        None
    }
}

/// Context a strategy may need at creation (tokenizer lookups such as a pause token).
pub struct StrategyContext<'a> {
    pub tokenizer: &'a entrobatch_model_runner::Tokenizer,
    /// The model's `[MASK]` id (WeDLM checkpoints); `None` for ordinary models.
    pub mask_token_id: Option<u32>,
    /// The engine's context limit and the request's `max_tokens`: where a WeDLM window stops.
    pub max_model_len: usize,
    pub max_tokens: usize,
    /// Live counters a strategy may update; `None` when it is built only to validate a request.
    pub metrics: Option<std::sync::Arc<crate::metrics::EngineMetrics>>,
}

impl<'a> StrategyContext<'a> {
    /// No mask token, no limits, no metrics: enough for strategies that only need the tokenizer.
    pub fn new(tokenizer: &'a entrobatch_model_runner::Tokenizer) -> Self {
        Self { tokenizer, mask_token_id: None, max_model_len: usize::MAX, max_tokens: usize::MAX, metrics: None }
    }
}

pub fn build_strategy(
    decoding: &Decoding,
    ctx: &StrategyContext<'_>,
) -> Result<Box<dyn SequenceStrategy>, StrategyError> {
    match decoding {
        Decoding::Plain => Ok(Box::new(PlainStrategy)),
        Decoding::Entropix(config) => Ok(Box::new(EntropixStrategy::new(config.clone(), ctx)?)),
        Decoding::Mti(config) => Ok(Box::new(MtiStrategy::build(config, ctx.tokenizer)?)),
        Decoding::Branch(config) => Ok(Box::new(BranchStrategy::new(config.clone())?)),
        Decoding::Wedlm(config) => {
            let mask = ctx.mask_token_id.ok_or(StrategyError::NoMaskToken { strategy: "wedlm" })?;
            let metrics = ctx.metrics.clone();
            Ok(Box::new(WedlmStrategy::new(config, mask, ctx.max_tokens, ctx.max_model_len, metrics)?))
        }
    }
}
