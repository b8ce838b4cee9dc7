use entrobatch_sampler::{entropy_varentropy_nats, sample_row, SampleInput};

use super::{SequenceStrategy, StrategyError, StrategyInput, StrategyOutput};
use crate::event::{GeneratedToken, TokenLogprob, TokenMetrics};

/// The sampler's plain chain (greedy, temperature, top-k/top-p/min-p, penalties, seed).
#[derive(Default)]
pub struct PlainStrategy;

impl SequenceStrategy for PlainStrategy {
    fn process(&mut self, input: StrategyInput<'_>) -> Result<StrategyOutput, StrategyError> {
        let Some(logits) = input.logits.first() else {
            return Ok(StrategyOutput::default());
        };
        let (token_id, logprob) = sample_plain(&input, logits)?;
        Ok(StrategyOutput {
            tokens: vec![GeneratedToken {
                token_id,
                logprob,
                metrics: input.return_metrics.then(|| logit_metrics(logits)),
            }],
            next_scratch_rows: 0,
            fork: None,
        })
    }
}

/// Draws from `logits` with the request's plain sampler chain; the logprob when asked for.
/// Strategies that rewrite logits (MTI's blend) sample through this too.
pub(super) fn sample_plain(
    input: &StrategyInput<'_>,
    logits: &[f32],
) -> Result<(u32, Option<TokenLogprob>), StrategyError> {
    let out = sample_row(&SampleInput {
        logits,
        params: input.sampling,
        prompt_token_ids: input.prompt_token_ids,
        output_token_ids: input.output_token_ids,
        seed: input.seed,
        step: input.output_token_ids.len() as u64,
        mask: input.mask,
    })?;
    let logprob =
        out.logprob.map(|logprob| TokenLogprob { token_id: out.token_id, logprob, top_logprobs: out.top_logprobs });
    Ok((out.token_id, logprob))
}

/// Entropy (bits) and varentropy (bits^2) of the raw distribution.
pub fn logit_metrics(logits: &[f32]) -> TokenMetrics {
    let (h, v) = entropy_varentropy_nats(logits);
    let ln2 = std::f32::consts::LN_2;
    TokenMetrics { entropy: h / ln2, varentropy: v / (ln2 * ln2), ..TokenMetrics::default() }
}
