//! Prompt log-probabilities (vLLM's `prompt_logprobs`, OpenAI's `echo` with `logprobs`): the
//! row at position `p` of a prefill chunk predicts prompt token `p + 1`, so scoring the prompt
//! asks the forward for the logits of the chunk's rows, and only for requests that want them.
//! Position 0 has no logprob (nothing predicts it); the prompt's last row predicts the first
//! generated token and stays the sampler's.

use std::ops::Range;

use entrobatch_sampler::top_logprobs;

use crate::event::PromptLogprob;

/// The scoring state of one request: how many top alternatives to report, and the next
/// prompt position to score. A preemption recomputes rows already scored; they are skipped.
#[derive(Clone, Debug)]
pub struct PromptScoring {
    top: usize,
    next_target: usize,
}

impl PromptScoring {
    pub fn new(top: usize) -> Self {
        Self { top, next_target: 1 }
    }

    /// Rows (0-based within the span's query tokens) whose logits score a prompt token not yet
    /// scored, for a span that computes `num_query_tokens` tokens from `context_len` on.
    pub fn rows(&self, context_len: usize, num_query_tokens: usize, num_prompt_tokens: usize) -> Range<usize> {
        // Row r predicts position context_len + r + 1, which must be a prompt position >= next.
        let first = self.next_target.saturating_sub(context_len + 1);
        let end = num_prompt_tokens.saturating_sub(context_len + 1).min(num_query_tokens);
        first.min(end)..end
    }

    /// Scores the rows `rows(...)` returned, in order; `prompt` is the whole prompt.
    pub fn score<'a>(
        &mut self,
        context_len: usize,
        rows: Range<usize>,
        logits: impl Iterator<Item = &'a [f32]>,
        prompt: &[u32],
    ) -> Vec<PromptLogprob> {
        let mut out = Vec::with_capacity(rows.len());
        for (row, logits) in rows.zip(logits) {
            let target = context_len + row + 1;
            let Some(&token_id) = prompt.get(target) else { break };
            out.push(score_row(logits, token_id, self.top));
            self.next_target = target + 1;
        }
        out
    }
}

/// The token's log-probability under the row, its rank (1 = the most likely; ties share the
/// better rank, as vLLM counts), and the row's `top` best.
/// The log-partition is kept as `max + log_sum` and applied as `(l - max) - log_sum`, the
/// sampler's arithmetic, so the token's logprob equals its entry among `top_logprobs` exactly.
fn score_row(logits: &[f32], token_id: u32, top: usize) -> PromptLogprob {
    let logit = logits.get(token_id as usize).copied().unwrap_or(f32::NEG_INFINITY);
    let rank = 1 + logits.iter().filter(|&&l| l > logit).count() as u32;
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let log_sum = logits.iter().map(|&l| f64::from((l - max).exp())).sum::<f64>().ln() as f32;
    PromptLogprob { token_id, logprob: (logit - max) - log_sum, rank, top_logprobs: top_logprobs(logits, top) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_cover_each_prompt_position_once_across_chunks_and_recompute() {
        let mut s = PromptScoring::new(0);
        // A 10-token prompt in chunks of 4, 4, 2: rows predict positions 1..=9, then the first
        // generated token (row 1 of the last chunk) is not a prompt row.
        assert_eq!(s.rows(0, 4, 10), 0..4);
        let logits = vec![vec![0.0f32; 12]; 4];
        let prompt: Vec<u32> = (0..10).collect();
        let scored = s.score(0, 0..4, logits.iter().map(Vec::as_slice), &prompt);
        assert_eq!(scored.iter().map(|p| p.token_id).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        assert_eq!(s.rows(4, 4, 10), 0..4);
        s.score(4, 0..4, logits.iter().map(Vec::as_slice), &prompt);
        assert_eq!(s.rows(8, 2, 10), 0..1);
        // Preempted and recomputed from 0 before the last chunk: nothing is scored twice.
        assert_eq!(s.rows(0, 8, 10), 8..8);
        assert_eq!(s.rows(0, 10, 10), 8..9);
        s.score(0, 8..9, logits.iter().map(Vec::as_slice), &prompt);
        assert_eq!(s.rows(0, 10, 10), 9..9);
        // A decode step (past the prompt) has no prompt rows.
        assert!(s.rows(10, 1, 10).is_empty());
    }

    #[test]
    fn a_row_scores_its_target_against_the_full_softmax() {
        // logits [1, 2, 3]: lse = 3.4076059; token 1 has logprob -1.4076059 and rank 2.
        let p = score_row(&[1.0, 2.0, 3.0], 1, 2);
        assert!((p.logprob + 1.407_606).abs() < 1e-5, "{}", p.logprob);
        assert_eq!(p.rank, 2);
        assert_eq!(p.top_logprobs.iter().map(|t| t.0).collect::<Vec<_>>(), vec![2, 1]);
        assert_eq!(score_row(&[5.0, 5.0, 1.0], 1, 0).rank, 1, "a tie shares the better rank");
        let row = [0.3, -1.7, 2.25, 0.0];
        assert_eq!(score_row(&row, 2, 1).logprob, score_row(&row, 2, 1).top_logprobs[0].1, "same arithmetic");
    }
}
