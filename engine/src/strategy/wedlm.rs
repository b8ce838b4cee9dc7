//! WeDLM streaming parallel decoding (Tencent/WeDLM, arXiv 2512.22737) as a per-sequence
//! strategy. A window of W slots after the committed tokens holds sampled tokens and
//! `[MASK]`s; each forward predicts every mask (a mask at position p predicts the token AT p)
//! and fills those whose position-penalised entropy is low enough.
//!
//! Mapping onto the engine's rows. The reference's step is: refill the window by the length p
//! of its leading filled run, run it with filled slots first then masks (each ascending, RoPE
//! at logical positions) on top of the cache, commit the leading run (its K/V, written this
//! forward, becomes permanent), then fill masks. Here, after the fill, the leading run is
//! returned from `process` right away: the engine appends the tokens (stop checks apply to
//! them, in order) and the scheduler runs them as the next step's token rows with real KV
//! slots, followed in the same span by the rest of the window as scratch rows (slot -1):
//! filled tokens, then masks. Row for row this is the reference's forward, commit rows first,
//! and those rows see exactly the cached context plus the committed rows before them, so
//! their K/V is that of an autoregressive prefill of prompt + committed tokens.

use std::sync::Arc;

use entrobatch_sampler::wedlm::{sample_mask_token, select_positions};
use entrobatch_sampler::{apply_logit_bias, entropy_nats, log_softmax, top_logprobs, uniform};

use super::plain::logit_metrics;
use super::wedlm_config::WedlmConfig;
use super::{ScratchRow, SequenceStrategy, SpanPlan, StrategyError, StrategyInput, StrategyOutput};
use crate::event::{GeneratedToken, TokenLogprob};
use crate::metrics::EngineMetrics;

/// Where this step's window rows sit in the span, from `scratch_rows` to `process`.
struct Layout {
    token_rows: usize,
    filled_rows: usize,
    /// Window slots of the mask rows, ascending: the order of their logits.
    mask_slots: Vec<usize>,
    /// Committed tokens once this step's token rows are in (the window's first position).
    ctx: usize,
}

pub struct WedlmStrategy {
    config: WedlmConfig,
    mask_token_id: u32,
    max_tokens: usize,
    max_model_len: usize,
    /// `None` until the prompt (after a preemption: prompt + committed tokens) is prefilled.
    /// A slot is a filled token or a mask (`None`).
    window: Option<Vec<Option<GeneratedToken>>>,
    layout: Option<Layout>,
    forwards: u64,
    committed: u64,
    metrics: Option<Arc<EngineMetrics>>,
}

impl WedlmStrategy {
    pub fn new(
        config: &WedlmConfig,
        mask_token_id: u32,
        max_tokens: usize,
        max_model_len: usize,
        metrics: Option<Arc<EngineMetrics>>,
    ) -> Result<Self, StrategyError> {
        config.validate()?;
        Ok(Self {
            config: config.clone(),
            mask_token_id,
            max_tokens,
            max_model_len,
            window: None,
            layout: None,
            forwards: 0,
            committed: 0,
            metrics,
        })
    }

    /// Window slots available from `ctx` on: the window never runs past `max_tokens` or the
    /// context (the reference does, and crashes at `max_model_len`).
    fn window_len(&self, num_prompt: usize, ctx: usize) -> usize {
        let limit = (num_prompt + self.max_tokens).min(self.max_model_len);
        self.config.window_size.min(limit.saturating_sub(ctx))
    }

    fn filled_token(&self, logits: &[f32], token_id: u32, input: &StrategyInput<'_>) -> GeneratedToken {
        let logprob = input.sampling.logprobs.map(|n| {
            let lp = log_softmax(logits);
            TokenLogprob { token_id, logprob: lp[token_id as usize], top_logprobs: top_logprobs(logits, n) }
        });
        GeneratedToken { token_id, logprob, metrics: input.return_metrics.then(|| logit_metrics(logits)) }
    }
}

impl SequenceStrategy for WedlmStrategy {
    fn scratch_rows(&mut self, plan: &SpanPlan<'_>) -> Vec<ScratchRow> {
        self.layout = None;
        let Some(window) = &self.window else { return Vec::new() };
        if plan.scratch_rows == 0 {
            // Not granted this step (budget): the window waits, unchanged.
            return Vec::new();
        }
        let ctx = plan.context_len + plan.token_ids.len();
        let filled = (0..window.len()).filter(|&k| window[k].is_some());
        let masks = (0..window.len()).filter(|&k| window[k].is_none());
        let mut order: Vec<usize> = filled.chain(masks).collect();
        // The scheduler grants what `process` asked for, i.e. the whole window.
        order.truncate(plan.scratch_rows);
        let filled_rows = order.iter().take_while(|&&k| window[k].is_some()).count();
        let rows = order
            .iter()
            .map(|&k| ScratchRow {
                token_id: window[k].as_ref().map_or(self.mask_token_id, |t| t.token_id),
                position: (ctx + k) as u32,
            })
            .collect();
        self.layout = Some(Layout {
            token_rows: plan.token_ids.len(),
            filled_rows,
            mask_slots: order[filled_rows..].to_vec(),
            ctx,
        });
        rows
    }

    fn logits_rows(&self, plan: &SpanPlan<'_>, num_scratch: usize) -> Vec<usize> {
        match &self.layout {
            Some(l) if num_scratch > 0 && !l.mask_slots.is_empty() => {
                (0..l.mask_slots.len()).map(|j| l.token_rows + l.filled_rows + j).collect()
            }
            // No mask row (cannot happen with a full grant): still call `process` to re-ask.
            Some(l) if num_scratch > 0 => vec![l.token_rows + num_scratch - 1],
            // The prefill's last row: WeDLM discards its next-token logits, but `process` must
            // run to open the first (all-mask) window.
            None if self.window.is_none() && plan.needs_sample && !plan.token_ids.is_empty() => {
                vec![plan.token_ids.len() - 1]
            }
            _ => Vec::new(),
        }
    }

    fn process(&mut self, input: StrategyInput<'_>) -> Result<StrategyOutput, StrategyError> {
        let num_prompt = input.prompt_token_ids.len();
        let layout = self.layout.take();
        let Some(mut window) = self.window.take() else {
            let ctx = num_prompt + input.output_token_ids.len();
            let len = self.window_len(num_prompt, ctx);
            if len == 0 {
                // Only reachable if the engine let `prompt + max_tokens` exceed the context.
                return Err(StrategyError::internal(
                    "wedlm",
                    "no room for a window before the context or max_tokens ends",
                ));
            }
            self.window = Some(vec![None; len]);
            return Ok(StrategyOutput { tokens: Vec::new(), next_scratch_rows: len, fork: None });
        };
        let Some(layout) = layout.filter(|l| !l.mask_slots.is_empty()) else {
            let len = window.len();
            self.window = Some(window);
            return Ok(StrategyOutput { tokens: Vec::new(), next_scratch_rows: len, fork: None });
        };
        if input.logits.len() != layout.mask_slots.len() {
            return Err(StrategyError::internal(
                "wedlm",
                format!("{} logits rows for {} masks", input.logits.len(), layout.mask_slots.len()),
            ));
        }
        let sampling = input.sampling;
        let mut entropy = Vec::with_capacity(input.logits.len());
        let mut sampled = Vec::with_capacity(input.logits.len());
        for (&logits, &slot) in input.logits.iter().zip(&layout.mask_slots) {
            // `logit_bias` is per token, the same for every mask row, so it applies as it would
            // one token at a time. The entropy that decides the fill is taken on the biased row
            // too: a position is filled when the distribution it is drawn from is confident
            // (with no bias this is the reference's raw-logit entropy).
            let biased = (!sampling.logit_bias.is_empty()).then(|| {
                let mut row = logits.to_vec();
                apply_logit_bias(&mut row, &sampling.logit_bias);
                row
            });
            let row = biased.as_deref().unwrap_or(logits);
            entropy.push(entropy_nats(row));
            // A counter draw per (forward, position): independent of batch composition.
            let u = uniform(input.seed, self.forwards, (layout.ctx + slot) as u64);
            let (t, k, p, min_p) = (sampling.temperature, sampling.top_k, sampling.top_p, sampling.min_p);
            sampled.push(sample_mask_token(row, t, k, p, min_p, u));
        }
        let chosen =
            select_positions(&entropy, &layout.mask_slots, self.config.entropy_threshold, self.config.pos_penalty);
        for j in chosen {
            window[layout.mask_slots[j]] = Some(self.filled_token(input.logits[j], sampled[j], &input));
        }
        self.forwards += 1;
        // Commit the leading filled run now; it runs as the next step's token rows.
        let p = window.iter().take_while(|s| s.is_some()).count();
        let tokens: Vec<GeneratedToken> = window.drain(..p).flatten().collect();
        self.committed += p as u64;
        window.resize(self.window_len(num_prompt, layout.ctx + p), None);
        if let Some(m) = &self.metrics {
            use std::sync::atomic::Ordering::Relaxed;
            m.wedlm.forwards.fetch_add(1, Relaxed);
            m.wedlm.tokens.fetch_add(p as u64, Relaxed);
            m.wedlm.window_rows.fetch_add((layout.filled_rows + layout.mask_slots.len()) as u64, Relaxed);
        }
        let next_scratch_rows = window.len();
        self.window = Some(window);
        Ok(StrategyOutput { tokens, next_scratch_rows, fork: None })
    }

    /// The uncommitted window is lost; the sequence resumes from its committed tokens with a
    /// fresh all-mask window once it is prefilled again.
    fn on_preempted(&mut self) {
        self.window = None;
        self.layout = None;
    }

    /// A full window rides beside the committed tokens. Its rows are scratch (slot -1): they
    /// never write the cache, so unlike the reference's `len + 2W` no KV slots are reserved.
    fn max_scratch_rows(&self) -> usize {
        self.config.window_size
    }

    fn summary(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({
            "strategy": "wedlm",
            "window_forwards": self.forwards,
            "committed_tokens": self.committed,
            "tokens_per_forward": (self.forwards > 0).then(|| self.committed as f64 / self.forwards as f64),
        }))
    }
}

impl Drop for WedlmStrategy {
    /// The request is over (finished, aborted or failed): record its tokens per forward.
    fn drop(&mut self) {
        if let (Some(m), true) = (&self.metrics, self.forwards > 0) {
            m.wedlm.request_tokens_per_forward.observe(self.committed as f64 / self.forwards as f64);
        }
    }
}
