//! MTI: classifier-free guidance on the tokens whose conditional entropy exceeds a threshold
//! (arXiv 2510.13940). The unconditional branch is the sequence's own context followed by a
//! short negative prompt, run as scratch rows of the sequence's span: they read its cached
//! K/V, attend causally to each other, and are never persisted.
//!
//! Per sequence, a triggered token takes two engine steps: the conditional row is sampled,
//! found uncertain, and kept; the next step runs only the negative-prompt rows (next to the
//! other sequences' prefill and decode rows, charged to the token budget), and the token is
//! drawn from the blend. Only triggered sequences pay rows, and they pay L rows, not a second
//! batch-wide forward. With a negative threshold every row triggers, so the unconditional
//! rows ride along with the decode row of the same step instead (classic CFG, no extra step).
//! Uncertainty comes in runs, so after a guided token the next decode row also brings its
//! unconditional rows along (trigger prediction): when it triggers again the token is emitted
//! without the extra step; when it does not, the L rows were spent for nothing and the token
//! is drawn from the conditional row as usual. Either way the tokens are the same as without
//! prediction: the unconditional rows read the same context whichever step runs them.
//!
//! Every token MTI emits while active carries `TokenMetrics` (entropy in bits of the raw
//! conditional row, `guided`), so clients see which tokens were guided; a guided token's
//! logprob is taken from the blended distribution it was drawn from (as in the reference
//! vLLM patch, which rewrites the logits before the sampler).

use std::borrow::Cow;

use entrobatch_sampler::entropy_varentropy_nats;
use entrobatch_sampler::mti::{cfg_blend, guidance_triggers, reference_threshold};
use serde::{Deserialize, Serialize};

use super::plain::{sample_plain, PlainStrategy};
use super::{ScratchRow, SequenceStrategy, SpanPlan, StrategyError, StrategyInput, StrategyOutput};
use crate::event::{GeneratedToken, TokenMetrics};

/// Per-request MTI settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MtiConfig {
    /// tau, in nats over the raw conditional distribution; guidance fires when `H > tau`.
    /// Negative or 0: every token (classic CFG; 0 as in the reference's `tau or -1`, so even a
    /// row of entropy exactly 0 is guided). `+inf`: never.
    pub entropy_threshold: f32,
    /// omega in `l_u + omega * (l_c - l_u)`; 1 turns MTI off entirely (no extra rows).
    pub guidance_scale: f32,
    /// Appended to the context to form the unconditional branch; tokenized without
    /// special tokens.
    pub negative_prompt: String,
}

impl Default for MtiConfig {
    /// The paper's omega and "OUTPUT ERROR"; tau = 1.0 is the middle of its sweep.
    fn default() -> Self {
        Self { entropy_threshold: 1.0, guidance_scale: 1.5, negative_prompt: "OUTPUT ERROR".into() }
    }
}

impl MtiConfig {
    pub fn is_active(&self) -> bool {
        self.guidance_scale != 1.0
    }

    /// Checks the numbers and tokenizes the negative prompt (empty when MTI is off).
    pub fn negative_prompt_ids(
        &self,
        tokenizer: &entrobatch_model_runner::Tokenizer,
    ) -> Result<Vec<u32>, StrategyError> {
        if self.entropy_threshold.is_nan() {
            return Err(StrategyError::config("mti", "entropy_threshold must be a number (negative = every token)"));
        }
        if !self.guidance_scale.is_finite() {
            return Err(StrategyError::config(
                "mti",
                format!("guidance_scale must be finite, got {}", self.guidance_scale),
            ));
        }
        if !self.is_active() {
            return Ok(Vec::new());
        }
        let ids = tokenizer
            .encode(&self.negative_prompt, false)
            .map_err(|e| StrategyError::config("mti", format!("cannot tokenize the negative prompt: {e}")))?;
        if ids.is_empty() {
            return Err(StrategyError::config("mti", "the negative prompt is empty"));
        }
        Ok(ids)
    }
}

/// A conditional row found uncertain, waiting for its unconditional rows.
struct PendingGuidance<'a> {
    cond: Cow<'a, [f32]>,
    entropy: f32,
    varentropy: f32,
}

pub struct MtiStrategy {
    threshold: f32,
    scale: f32,
    negative: Vec<u32>,
    /// After a guided token, run the next token's unconditional rows with its decode row.
    predict: bool,
    /// Whether the next decode row brings its unconditional rows along.
    fuse_next: bool,
    pending: Option<PendingGuidance<'static>>,
    /// Scratch rows this step's span carries (set while the batch is built).
    scratch_this_step: usize,
    tokens: u64,
    triggered: u64,
}

impl MtiStrategy {
    /// `negative` must be non-empty unless the config is inactive.
    pub fn new(config: &MtiConfig, negative: Vec<u32>) -> Self {
        let active = config.is_active() && !negative.is_empty();
        let mut strategy = Self {
            // tau = 0 is the reference's "every row" (`tau or -1`), not "H > 0".
            threshold: reference_threshold(config.entropy_threshold),
            scale: if active { config.guidance_scale } else { 1.0 },
            predict: true,
            fuse_next: false,
            negative,
            pending: None,
            scratch_this_step: 0,
            tokens: 0,
            triggered: 0,
        };
        strategy.fuse_next = strategy.always_triggers();
        strategy
    }

    pub fn build(config: &MtiConfig, tokenizer: &entrobatch_model_runner::Tokenizer) -> Result<Self, StrategyError> {
        Ok(Self::new(config, config.negative_prompt_ids(tokenizer)?))
    }

    /// Turns trigger prediction off: every triggered token then takes the two-step path
    /// (unless tau < 0). The tokens are the same either way; this changes only the schedule.
    pub fn with_trigger_prediction(mut self, on: bool) -> Self {
        self.predict = on;
        self
    }

    fn active(&self) -> bool {
        self.scale != 1.0
    }

    /// Every row triggers (tau < 0): the unconditional rows always ride with the decode row.
    fn always_triggers(&self) -> bool {
        self.active() && self.threshold < 0.0
    }
}

impl SequenceStrategy for MtiStrategy {
    fn scratch_rows(&mut self, plan: &SpanPlan<'_>) -> Vec<ScratchRow> {
        self.scratch_this_step = 0;
        let l = self.negative.len();
        if !self.active() || plan.scratch_rows < l {
            return Vec::new();
        }
        // Tokens scheduled beside a pending row mean the sequence moved on without it.
        if !plan.token_ids.is_empty() {
            self.pending = None;
        }
        let for_pending = self.pending.is_some();
        let for_fused = self.fuse_next && plan.needs_sample && !plan.token_ids.is_empty();
        if !(for_pending || for_fused) {
            return Vec::new();
        }
        let base = plan.context_len + plan.token_ids.len();
        self.scratch_this_step = l;
        self.negative
            .iter()
            .enumerate()
            .map(|(i, &token_id)| ScratchRow { token_id, position: (base + i) as u32 })
            .collect()
    }

    fn max_scratch_rows(&self) -> usize {
        if self.active() {
            self.negative.len()
        } else {
            0
        }
    }

    fn positions_past_end(&self) -> usize {
        self.max_scratch_rows().saturating_sub(1)
    }

    fn logits_rows(&self, plan: &SpanPlan<'_>, num_scratch: usize) -> Vec<usize> {
        let n = plan.token_ids.len();
        let mut rows = Vec::with_capacity(2);
        if plan.needs_sample && n > 0 {
            rows.push(n - 1);
        }
        if num_scratch > 0 {
            rows.push(n + num_scratch - 1);
        }
        rows
    }

    fn process(&mut self, input: StrategyInput<'_>) -> Result<StrategyOutput, StrategyError> {
        if !self.active() {
            return PlainStrategy.process(input);
        }
        let granted = std::mem::take(&mut self.scratch_this_step) > 0;
        let (uncond, fresh) = match (granted, input.logits.as_slice()) {
            (true, [cond, uncond]) => (Some(*uncond), Some(*cond)),
            (true, [uncond]) => (Some(*uncond), None),
            (false, [cond]) => (None, Some(*cond)),
            _ => return Err(StrategyError::internal("mti", format!("unexpected {} logits rows", input.logits.len()))),
        };
        // Borrowed while fresh: only a row that waits for its scratch rows is copied.
        let pending = match fresh {
            Some(cond) => {
                let (entropy, varentropy) = entropy_varentropy_nats(cond);
                PendingGuidance { cond: Cow::Borrowed(cond), entropy, varentropy }
            }
            None => self
                .pending
                .take()
                .ok_or_else(|| StrategyError::internal("mti", "unconditional rows without a pending token"))?,
        };
        let triggered = guidance_triggers(pending.entropy, self.threshold, self.scale);
        let l = self.negative.len();
        let (token_id, logprob) = match (triggered, uncond) {
            (true, None) => {
                let PendingGuidance { cond, entropy, varentropy } = pending;
                self.pending = Some(PendingGuidance { cond: Cow::Owned(cond.into_owned()), entropy, varentropy });
                return Ok(StrategyOutput { tokens: Vec::new(), next_scratch_rows: l, fork: None });
            }
            (true, Some(uncond)) => sample_plain(&input, &cfg_blend(&pending.cond, uncond, self.scale))?,
            (false, _) => sample_plain(&input, &pending.cond)?,
        };
        self.tokens += 1;
        self.triggered += u64::from(triggered);
        self.fuse_next = self.always_triggers() || (self.predict && triggered);
        let ln2 = std::f32::consts::LN_2;
        let metrics = TokenMetrics {
            entropy: pending.entropy / ln2,
            varentropy: pending.varentropy / (ln2 * ln2),
            guided: Some(triggered),
            ..TokenMetrics::default()
        };
        Ok(StrategyOutput {
            tokens: vec![GeneratedToken { token_id, logprob, metrics: Some(metrics) }],
            next_scratch_rows: if self.fuse_next { l } else { 0 },
            fork: None,
        })
    }

    fn on_preempted(&mut self) {
        // The sequence recomputes and resamples its last row; the kept row is stale.
        self.pending = None;
        self.scratch_this_step = 0;
        self.fuse_next = self.always_triggers();
    }

    fn summary(&self) -> Option<serde_json::Value> {
        let rate = if self.tokens > 0 { self.triggered as f64 / self.tokens as f64 } else { 0.0 };
        Some(serde_json::json!({
            "strategy": "mti",
            "guidance": self.active(),
            "tokens": self.tokens,
            "triggered": self.triggered,
            "trigger_rate": rate,
        }))
    }
}

/// The paper's "CFG usage" of one request, from its per-token output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct TriggerStats {
    /// Tokens decoded with guidance active (every MTI token when omega != 1).
    pub tokens: usize,
    pub triggered: usize,
}

impl TriggerStats {
    pub fn from_tokens(tokens: &[GeneratedToken]) -> Self {
        let flags = tokens.iter().filter_map(|t| t.metrics.as_ref().and_then(|m| m.guided));
        flags.fold(Self::default(), |s, g| Self { tokens: s.tokens + 1, triggered: s.triggered + usize::from(g) })
    }

    pub fn rate(&self) -> f64 {
        if self.tokens == 0 {
            0.0
        } else {
            self.triggered as f64 / self.tokens as f64
        }
    }
}

#[cfg(test)]
#[path = "mti_tests.rs"]
mod tests;
