//! Verification of a draft by the request's own sampler, row by row.
//!
//! Row `i` of a verifying span holds the logits that follow draft token `i` (row 0: the
//! sequence's last token). The request's strategy draws from each row in turn, exactly as it
//! would have drawn that output token without speculation (the same penalties over the same
//! history, the grammar's mask after the same tokens, the draw `uniform(seed, step)` of the
//! same output index), and the draft is kept while the draws agree with it. The first draw
//! that differs is the output token at that position, and nothing after it is used.
//!
//! For a draft that is a point mass on its token (every drafter here), this is the standard
//! speculative-sampling rule (Leviathan et al. 2023, Chen et al. 2023): with `p` the target
//! distribution, the draft token `d` is kept with probability `p(d)` (= `min(1, p(d)/q(d))`
//! with `q(d) = 1`), and a rejection draws from `p` with `d` removed and renormalised (=
//! `norm(max(0, p - q))`). Drawing `x ~ p` with one uniform and keeping `d` iff `x == d` does
//! both: `P(x == d) = p(d)`, and given `x != d`, `x` follows `p` without `d`. So the output
//! distribution is the model's, and moreover the same seeded request gets the same tokens
//! with and without speculation, greedy or not.

use crate::event::GeneratedToken;
use crate::strategy::{SequenceStrategy, StrategyInput, StrategyOutput};
use crate::structured::Constraint;

/// What verifying one span decided.
#[derive(Debug, Default)]
pub struct Verdict {
    /// The kept draft tokens then the one drawn after them.
    pub output: StrategyOutput,
    /// Draft tokens kept: their KV, written by this forward, is the sequence's. The last
    /// drawn token came from logits row `num_accepted`.
    pub num_accepted: usize,
}

/// Draws the output tokens of a span whose logits rows are the last token's then each draft
/// token's (`input.logits.len() == draft.len() + 1`), keeping the draft while it agrees.
/// With a grammar, each row is drawn under the mask of the tokens before it, and the matcher
/// advances only over tokens that are output: a rejected draft token never touches it.
pub fn verify(
    strategy: &mut dyn SequenceStrategy,
    mut constraint: Option<&mut Constraint>,
    input: StrategyInput<'_>,
    draft: &[u32],
) -> Result<Verdict, String> {
    if input.logits.len() != draft.len() + 1 {
        return Err(format!("{} logits rows to verify a draft of {}", input.logits.len(), draft.len()));
    }
    let mut history = input.output_token_ids.to_vec();
    let mut tokens: Vec<GeneratedToken> = Vec::with_capacity(draft.len() + 1);
    for (i, &logits) in input.logits.iter().enumerate() {
        let mask = match constraint.as_deref_mut() {
            Some(c) => Some(c.mask().map_err(|e| e.to_string())?),
            None => None,
        };
        let row = StrategyInput {
            logits: vec![logits],
            attn_metrics: None,
            prompt_token_ids: input.prompt_token_ids,
            output_token_ids: &history,
            sampling: input.sampling,
            seed: input.seed,
            return_metrics: input.return_metrics,
            mask,
        };
        let out = strategy.process(row).map_err(|e| e.to_string())?;
        let [token] = <[GeneratedToken; 1]>::try_from(out.tokens)
            .map_err(|t| format!("a speculating strategy chose {} tokens from one row", t.len()))?;
        if let Some(c) = constraint.as_deref_mut() {
            c.commit(token.token_id).map_err(|e| e.to_string())?;
        }
        let agrees = draft.get(i) == Some(&token.token_id);
        history.push(token.token_id);
        tokens.push(token);
        let grammar_done = constraint.as_deref().is_some_and(Constraint::is_finished);
        if !agrees || grammar_done {
            break;
        }
    }
    let num_accepted = tokens.len() - 1;
    Ok(Verdict { output: StrategyOutput { tokens, next_scratch_rows: 0, fork: None }, num_accepted })
}

#[cfg(test)]
mod tests {
    use entrobatch_sampler::SamplingParams;

    use super::*;
    use crate::strategy::PlainStrategy;

    fn softmax(logits: &[f32], temperature: f32) -> Vec<f64> {
        let max = logits.iter().fold(f32::NEG_INFINITY, |m, &l| m.max(l));
        let e: Vec<f64> = logits.iter().map(|&l| (((l - max) / temperature) as f64).exp()).collect();
        let z: f64 = e.iter().sum();
        e.iter().map(|x| x / z).collect()
    }

    /// Pearson's statistic of `counts` against `expected` probabilities.
    fn chi_square(counts: &[u64], expected: &[f64]) -> f64 {
        let n: u64 = counts.iter().sum();
        counts.iter().zip(expected).map(|(&c, &p)| (c as f64 - n as f64 * p).powi(2) / (n as f64 * p)).sum()
    }

    fn run(seed: u64, rows: [&[f32]; 2], draft: u32, sampling: &SamplingParams) -> Verdict {
        let input = StrategyInput {
            logits: rows.to_vec(),
            attn_metrics: None,
            prompt_token_ids: &[1, 2],
            output_token_ids: &[3],
            sampling,
            seed,
            return_metrics: false,
            mask: None,
        };
        verify(&mut PlainStrategy, None, input, &[draft]).expect("verify")
    }

    /// Speculative sampling keeps the target distribution: over many seeded draws, the first
    /// token follows softmax(row 0 / T) whether the draft was kept or not, the draft is kept
    /// with probability p(draft), and the token after a kept draft follows row 1.
    #[test]
    fn verified_samples_follow_the_model_distribution() {
        let row0: &[f32] = &[1.0, 2.5, 0.3, 2.0, -1.0, 0.0, 1.5, 0.8];
        let row1: &[f32] = &[0.2, -0.5, 1.7, 0.9, 2.2, 0.0, -1.0, 1.1];
        let sampling = SamplingParams { temperature: 0.8, ..SamplingParams::default() };
        let (p0, p1) = (softmax(row0, 0.8), softmax(row1, 0.8));
        let draft = 3;
        let n = 40_000u64;
        let (mut first, mut second, mut kept) = ([0u64; 8], [0u64; 8], 0u64);
        for seed in 0..n {
            let verdict = run(seed, [row0, row1], draft, &sampling);
            let tokens: Vec<u32> = verdict.output.tokens.iter().map(|t| t.token_id).collect();
            first[tokens[0] as usize] += 1;
            if verdict.num_accepted == 1 {
                assert_eq!(tokens[0], draft);
                kept += 1;
                second[tokens[1] as usize] += 1;
            } else {
                assert_ne!(tokens[0], draft);
                assert_eq!(tokens.len(), 1);
            }
        }
        // 7 degrees of freedom: 24.3 is the 0.1% tail.
        assert!(chi_square(&first, &p0) < 24.3, "first token {first:?} against {p0:?}");
        assert!(chi_square(&second, &p1) < 24.3, "token after a kept draft {second:?} against {p1:?}");
        let rate = kept as f64 / n as f64;
        let sd = (p0[3] * (1.0 - p0[3]) / n as f64).sqrt();
        assert!((rate - p0[3]).abs() < 4.0 * sd, "kept {rate}, p(draft) {}", p0[3]);
    }

    /// Greedy verification keeps the draft exactly while it is the argmax.
    #[test]
    fn greedy_keeps_the_draft_while_it_is_the_argmax() {
        let sampling = SamplingParams::greedy();
        let row0: &[f32] = &[0.0, 3.0, 1.0];
        let row1: &[f32] = &[2.0, 0.0, 1.0];
        let kept = run(1, [row0, row1], 1, &sampling);
        assert_eq!(kept.num_accepted, 1);
        assert_eq!(kept.output.tokens.iter().map(|t| t.token_id).collect::<Vec<_>>(), [1, 0]);
        let rejected = run(1, [row0, row1], 2, &sampling);
        assert_eq!(rejected.num_accepted, 0);
        assert_eq!(rejected.output.tokens.iter().map(|t| t.token_id).collect::<Vec<_>>(), [1]);
    }
}
