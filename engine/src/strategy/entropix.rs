//! Entropix v1 per sequence: the sampler's `entropix_sample` on the raw logits plus the last
//! layer's attention metrics of this sequence's sampled row (the runner computes them only
//! for spans whose strategy asks, so plain rows in the same batch cost nothing extra).

use entrobatch_model_runner::{AttnMetrics, Tokenizer};
use entrobatch_sampler::entropix::{entropix_sample, AttentionStats, Branch, EntropixConfig, EntropixInput};
use entrobatch_sampler::{apply_penalties, needs_penalties, top_logprobs};

use super::{SequenceStrategy, StrategyContext, StrategyError, StrategyInput, StrategyOutput};
use crate::event::{GeneratedToken, TokenLogprob, TokenMetrics};

/// Texts tried, in order, for the pause / clarification token. The first that the model's
/// tokenizer encodes as exactly one token wins: `" ..."` is Llama-3's 2564 (the reference's
/// pause token); vocabularies without it get a bare `"..."`, else the clarifying-question
/// `"?"` of seed 001 (with or without a leading space).
pub const PAUSE_TOKEN_TEXTS: [&str; 4] = [" ...", "...", " ?", "?"];

/// Looks up the pause token in the model's vocabulary; `None` if no candidate is one token.
pub fn find_pause_token(tokenizer: &Tokenizer) -> Option<u32> {
    PAUSE_TOKEN_TEXTS.iter().find_map(|text| match tokenizer.encode(text, false) {
        Ok(ids) if ids.len() == 1 => Some(ids[0]),
        _ => None,
    })
}

pub struct EntropixStrategy {
    config: EntropixConfig,
    pause_token: Option<u32>,
    /// Tokens per branch, in `Branch::ALL` order, for the request summary.
    branch_counts: [u64; 6],
}

impl EntropixStrategy {
    pub fn new(config: EntropixConfig, ctx: &StrategyContext<'_>) -> Result<Self, StrategyError> {
        config.validate().map_err(|e| StrategyError::config("entropix", e.to_string()))?;
        let vocab = ctx.tokenizer.vocab_size;
        let pause_token = match config.pause_token_id {
            Some(id) if (id as usize) < vocab => Some(id),
            Some(id) => {
                return Err(StrategyError::config(
                    "entropix",
                    format!("pause_token_id {id} is outside the vocabulary of {vocab}"),
                ))
            }
            None => find_pause_token(ctx.tokenizer),
        };
        Ok(Self { config, pause_token, branch_counts: [0; 6] })
    }

    pub fn pause_token(&self) -> Option<u32> {
        self.pause_token
    }
}

fn to_stats(m: AttnMetrics) -> AttentionStats {
    AttentionStats {
        entropy: m.entropy,
        varentropy: m.varentropy,
        agreement: m.agreement,
        interaction_strength: m.interaction_strength,
    }
}

impl SequenceStrategy for EntropixStrategy {
    fn wants_attn_metrics(&self) -> bool {
        true
    }

    fn attn_pad_to(&self) -> Option<usize> {
        self.config.attention_pad_to
    }

    fn process(&mut self, input: StrategyInput<'_>) -> Result<StrategyOutput, StrategyError> {
        let Some(&logits) = input.logits.first() else {
            return Ok(StrategyOutput::default());
        };
        let prompt = input.prompt_token_ids;
        let output = input.output_token_ids;
        // Penalties and a structured-output mask shape the draw only; metrics and scores stay
        // on the raw row (they describe the model's uncertainty).
        let penalise = needs_penalties(input.sampling, prompt, output);
        let draw_row = (penalise || input.mask.is_some()).then(|| {
            let mut row = logits.to_vec();
            if penalise {
                apply_penalties(&mut row, input.sampling, prompt, output);
            }
            if let Some(mask) = input.mask {
                mask.apply(&mut row);
            }
            row
        });
        let pause_token = self.pause_token.filter(|&p| input.mask.is_none_or(|m| m.allows(p)));
        let decision = entropix_sample(
            &EntropixInput {
                logits,
                penalised: draw_row.as_deref(),
                attention: input.attn_metrics.map(to_stats),
                previous_token: output.last().or(prompt.last()).copied(),
                pause_token,
                seed: input.seed,
                step: output.len() as u64,
            },
            &self.config,
        )?;
        if let Some(i) = Branch::ALL.iter().position(|&b| b == decision.branch) {
            self.branch_counts[i] += 1;
        }
        let logprob = input.sampling.logprobs.map(|n| TokenLogprob {
            token_id: decision.token_id,
            logprob: decision.logprob,
            top_logprobs: top_logprobs(logits, n),
        });
        let metrics = input.return_metrics.then(|| TokenMetrics {
            entropy: decision.logit.entropy,
            varentropy: decision.logit.varentropy,
            attention: input.attn_metrics,
            branch: Some(decision.branch.as_str().to_string()),
            guided: None,
            fork: None,
        });
        Ok(StrategyOutput {
            tokens: vec![GeneratedToken { token_id: decision.token_id, logprob, metrics }],
            next_scratch_rows: 0,
            fork: None,
        })
    }

    fn summary(&self) -> Option<serde_json::Value> {
        let counts: serde_json::Map<String, serde_json::Value> =
            Branch::ALL.iter().zip(self.branch_counts).map(|(b, n)| (b.as_str().to_string(), n.into())).collect();
        Some(serde_json::json!({ "strategy": "entropix", "entropix_branches": counts }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use entrobatch_sampler::SamplingParams;

    /// The first token after prefill goes through the quadrants like every other, not the
    /// reference mains' argmax (`main.py` takes `argmax` of the prefill logits before the
    /// sampler is ever called): its metrics are those of an ordinary decode row here, and an
    /// argmax would give every seed of a sampled request the same first token.
    #[test]
    fn the_first_token_after_prefill_follows_the_branches_not_argmax() {
        // An adaptive-quadrant row (H ~ 4.9 bits, VH ~ 3.7): one token at 0.25, three at 0.2/3,
        // fifty sharing 0.55. Its argmax is token 0.
        let mut probs = vec![0.55f64 / 50.0; 54];
        probs[0] = 0.25;
        probs[1..4].fill(0.2 / 3.0);
        let logits: Vec<f32> = probs.iter().map(|p| p.ln() as f32).collect();
        let sampling = SamplingParams::default();
        let mut not_argmax = 0;
        for seed in 0..60 {
            let mut s =
                EntropixStrategy { config: EntropixConfig::default(), pause_token: None, branch_counts: [0; 6] };
            let input = StrategyInput {
                logits: vec![&logits],
                attn_metrics: None,
                prompt_token_ids: &[5, 6],
                output_token_ids: &[],
                sampling: &sampling,
                seed,
                return_metrics: true,
                mask: None,
            };
            let out = s.process(input).unwrap();
            let token = &out.tokens[0];
            let want = entropix_sample(
                &EntropixInput {
                    logits: &logits,
                    penalised: None,
                    attention: None,
                    previous_token: Some(6),
                    pause_token: None,
                    seed,
                    step: 0,
                },
                &EntropixConfig::default(),
            )
            .unwrap();
            assert_eq!(want.branch, Branch::Adaptive);
            assert_eq!(token.token_id, want.token_id, "seed {seed}");
            assert_eq!(token.metrics.as_ref().and_then(|m| m.branch.as_deref()), Some("adaptive"));
            not_argmax += usize::from(token.token_id != 0);
        }
        assert!(not_argmax >= 5, "only {not_argmax} of 60 first tokens differ from the argmax");
    }
}
