//! What a completion returns about its prompt: the prompt's text ahead of the output (`echo`),
//! its tokens' logprobs ahead of the output's in the completions layout (`echo` with
//! `logprobs`; the first token's are `null`, nothing predicts it), and vLLM's
//! `prompt_logprobs` list (`null`, then per position the prompt token and the row's best).

use entrobatch::{Engine, PromptLogprob};

use super::response::{CompletionLogprobs, PromptLogprobEntry, PromptLogprobMap};
use crate::response::format::token_text;

/// What the client asked to see of its prompt.
#[derive(Clone, Debug, Default)]
pub struct PromptEcho {
    /// `echo`: the prompt's text, sent ahead of the output.
    pub text: Option<String>,
    /// `echo` with `logprobs`: the prompt tokens lead the `logprobs` arrays.
    pub logprobs: bool,
    /// vLLM's `prompt_logprobs`: the `prompt_logprobs` field of the choice.
    pub prompt_logprobs: bool,
}

impl PromptEcho {
    pub fn is_empty(&self) -> bool {
        self.text.is_none() && !self.prompt_logprobs
    }
}

/// The prompt's entries of the completions `logprobs` arrays; `text_offset` starts the
/// offsets and carries on into the output's.
pub fn echo_logprobs(
    engine: &Engine,
    prompt: &[u32],
    scored: &[PromptLogprob],
    text_offset: &mut usize,
) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for (i, &id) in prompt.iter().enumerate() {
        let text = token_text(engine, id);
        out.text_offset.push(*text_offset);
        *text_offset += text.len();
        let scored = i.checked_sub(1).and_then(|j| scored.get(j));
        out.token_logprobs.push(scored.map(|p| f64::from(p.logprob)));
        out.top_logprobs.push(
            scored.map(|p| p.top_logprobs.iter().map(|&(id, lp)| (token_text(engine, id), f64::from(lp))).collect()),
        );
        out.tokens.push(text);
    }
    out
}

/// vLLM's `prompt_logprobs`: one entry per prompt token, `null` for the first.
pub fn vllm_prompt_logprobs(engine: &Engine, scored: &[PromptLogprob]) -> Vec<Option<PromptLogprobMap>> {
    let entry = |id: u32, logprob: f32, rank: u32| {
        (id, PromptLogprobEntry { logprob: f64::from(logprob), rank, decoded_token: token_text(engine, id) })
    };
    let mut out = Vec::with_capacity(scored.len() + 1);
    out.push(None);
    for p in scored {
        let mut map = PromptLogprobMap::default();
        map.push(entry(p.token_id, p.logprob, p.rank));
        for (rank, &(id, lp)) in (1u32..).zip(&p.top_logprobs) {
            if id != p.token_id {
                map.push(entry(id, lp, rank));
            }
        }
        out.push(Some(map));
    }
    out
}

/// Appends the output's logprobs to the prompt's.
pub fn extend_logprobs(head: &mut CompletionLogprobs, tail: CompletionLogprobs) {
    head.tokens.extend(tail.tokens);
    head.token_logprobs.extend(tail.token_logprobs);
    head.top_logprobs.extend(tail.top_logprobs);
    head.text_offset.extend(tail.text_offset);
}
