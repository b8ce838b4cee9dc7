//! History-dependent logits processors: logit bias, repetition, presence and
//! frequency penalties, and the no-repeat-n-gram ban.
//!
//! History token ids that fall outside the logits row are skipped rather than
//! reported: a token with no logit cannot be penalised, and some checkpoints
//! ship a tokenizer slightly larger than their output head.

use crate::params::SamplingParams;

/// Whether `apply_penalties` would change anything for this request, so
/// callers can skip copying the logits row when it would not.
pub fn needs_penalties(params: &SamplingParams, prompt: &[u32], output: &[u32]) -> bool {
    let history_len = prompt.len() + output.len();
    let n = params.no_repeat_ngram_size;
    !params.logit_bias.is_empty()
        || (params.repetition_penalty != 1.0 && history_len > 0)
        || ((params.presence_penalty != 0.0 || params.frequency_penalty != 0.0) && !output.is_empty())
        || (n > 0 && history_len >= n)
}

/// Applies, in place and in vLLM's order: logit bias, repetition penalty,
/// presence/frequency penalties, then the n-gram ban (banned tokens become -inf).
pub fn apply_penalties(logits: &mut [f32], params: &SamplingParams, prompt: &[u32], output: &[u32]) {
    apply_logit_bias(logits, &params.logit_bias);
    if params.repetition_penalty != 1.0 {
        apply_repetition_penalty(logits, params.repetition_penalty, prompt, output);
    }
    if params.presence_penalty != 0.0 || params.frequency_penalty != 0.0 {
        apply_presence_frequency(logits, params.presence_penalty, params.frequency_penalty, output);
    }
    let history = History { prompt, output };
    for token in banned_ngram_tokens(&history, params.no_repeat_ngram_size) {
        if let Some(l) = logits.get_mut(token as usize) {
            *l = f32::NEG_INFINITY;
        }
    }
}

/// OpenAI semantics: a duplicate id gets each of its biases added. Public on its own for
/// strategies that honour the bias but not the history penalties (WeDLM's parallel fill).
pub fn apply_logit_bias(logits: &mut [f32], bias: &[(u32, f32)]) {
    for &(token, b) in bias {
        if let Some(l) = logits.get_mut(token as usize) {
            *l += b;
        }
    }
}

/// HF/vLLM: each distinct token of prompt + output is penalised once, by
/// dividing a positive logit and multiplying a negative one, so that a
/// penalty > 1 always makes the token less likely.
fn apply_repetition_penalty(logits: &mut [f32], penalty: f32, prompt: &[u32], output: &[u32]) {
    // A bitset dedups the history without sorting it or hashing.
    let mut seen = vec![0u64; logits.len().div_ceil(64)];
    for &token in prompt.iter().chain(output) {
        let t = token as usize;
        if t >= logits.len() {
            continue;
        }
        let (word, bit) = (t / 64, 1u64 << (t % 64));
        if seen[word] & bit != 0 {
            continue;
        }
        seen[word] |= bit;
        let l = &mut logits[t];
        *l = if *l > 0.0 { *l / penalty } else { *l * penalty };
    }
}

/// vLLM/OpenAI: `logit -= presence * [count > 0] + frequency * count`, counting
/// only generated tokens so the prompt is never penalised.
fn apply_presence_frequency(logits: &mut [f32], presence: f32, frequency: f32, output: &[u32]) {
    let mut ids = output.to_vec();
    ids.sort_unstable();
    for run in ids.chunk_by(|a, b| a == b) {
        if let Some(l) = logits.get_mut(run[0] as usize) {
            *l -= presence + frequency * run.len() as f32;
        }
    }
}

/// The prompt and the output seen as one sequence, without concatenating them.
pub(crate) struct History<'a> {
    pub prompt: &'a [u32],
    pub output: &'a [u32],
}

impl History<'_> {
    fn len(&self) -> usize {
        self.prompt.len() + self.output.len()
    }

    fn at(&self, i: usize) -> u32 {
        match self.prompt.get(i) {
            Some(&t) => t,
            None => self.output[i - self.prompt.len()],
        }
    }
}

/// HF `no_repeat_ngram_size`: the tokens that, appended to the history, would
/// produce an n-gram that already occurs in it. With n = 1 that is every token
/// seen so far.
pub(crate) fn banned_ngram_tokens(history: &History<'_>, n: usize) -> Vec<u32> {
    let len = history.len();
    if n == 0 || len < n {
        return Vec::new();
    }
    // The last n-1 tokens are the prefix the next token would complete.
    let suffix_start = len - (n - 1);
    let mut banned = Vec::new();
    for start in 0..=len - n {
        let matches = (0..n - 1).all(|j| history.at(start + j) == history.at(suffix_start + j));
        if matches {
            banned.push(history.at(start + n - 1));
        }
    }
    banned
}

#[cfg(test)]
mod tests {
    use super::*;

    fn banned(prompt: &[u32], output: &[u32], n: usize) -> Vec<u32> {
        let mut b = banned_ngram_tokens(&History { prompt, output }, n);
        b.sort_unstable();
        b.dedup();
        b
    }

    #[test]
    fn ngram_ban_spans_prompt_and_output() {
        // Trigrams (1,2,3), (2,3,1), (3,1,2); the history ends in [1, 2] -> ban 3.
        assert_eq!(banned(&[1, 2, 3, 1], &[2], 3), vec![3]);
        // Bigrams (5,6), (6,7), (7,5); the history ends in [5] -> ban 6 only.
        assert_eq!(banned(&[5, 6, 7], &[5], 2), vec![6]);
        // A history ending in [9] that never occurred before bans nothing.
        assert_eq!(banned(&[5, 6, 7], &[9], 2), Vec::<u32>::new());
    }

    #[test]
    fn unigram_ban_is_every_seen_token_and_short_history_bans_nothing() {
        assert_eq!(banned(&[4, 2], &[4], 1), vec![2, 4]);
        assert_eq!(banned(&[1], &[2], 3), Vec::<u32>::new());
        assert_eq!(banned(&[1, 2], &[], 0), Vec::<u32>::new());
    }
}
