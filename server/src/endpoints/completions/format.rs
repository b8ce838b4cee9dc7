//! How a completion is rendered, whole and as stream chunks: the prompt's part first (`echo`,
//! `prompt_logprobs`), then the output's text with its logprobs (completions' layout) and
//! extras.

use entrobatch::{Engine, FinishReason, GeneratedToken, PromptLogprob};

use super::echo::{echo_logprobs, extend_logprobs, vllm_prompt_logprobs, PromptEcho};
use super::response::{CompletionChoice, CompletionChunk, CompletionLogprobs};
use crate::response::format::{token_text, Extras, Frame};
use crate::response::stream::StreamFormat;
use crate::response::{TokenExtras, Usage};

pub(super) struct CompletionFormat {
    pub frame: Frame,
    pub logprobs: bool,
    pub extras: Extras,
    pub text_offset: usize,
    pub prompt_token_ids: Vec<u32>,
    /// What to return of the prompt; taken by the first choice that carries it.
    pub echo: PromptEcho,
    /// Prompt logprobs received so far.
    pub scored: Vec<PromptLogprob>,
}

impl CompletionFormat {
    pub fn choice(&mut self, tokens: &[GeneratedToken], text: &str) -> CompletionChoice {
        CompletionChoice {
            index: 0,
            text: text.to_string(),
            logprobs: self
                .logprobs
                .then(|| completion_logprobs(&self.frame.state.engine, tokens, &mut self.text_offset)),
            finish_reason: None,
            prompt_logprobs: None,
            extras: self.extras.for_tokens(tokens),
        }
    }

    /// The prompt's part of the first choice (`echo`, `prompt_logprobs`), once; `None` when
    /// nothing of the prompt was asked for or it was already sent.
    pub fn prompt_choice(&mut self) -> Option<CompletionChoice> {
        let echo = std::mem::take(&mut self.echo);
        if echo.is_empty() {
            return None;
        }
        let engine = &self.frame.state.engine;
        let logprobs = match (self.logprobs, echo.logprobs) {
            (true, true) => Some(echo_logprobs(engine, &self.prompt_token_ids, &self.scored, &mut self.text_offset)),
            (true, false) => Some(CompletionLogprobs::default()),
            (false, _) => None,
        };
        Some(CompletionChoice {
            index: 0,
            text: echo.text.unwrap_or_default(),
            logprobs,
            finish_reason: None,
            prompt_logprobs: echo.prompt_logprobs.then(|| vllm_prompt_logprobs(engine, &self.scored)),
            extras: TokenExtras::default(),
        })
    }

    /// `head` followed by these tokens: text, logprobs and extras appended.
    pub fn append(&mut self, head: CompletionChoice, tokens: &[GeneratedToken], text: &str) -> CompletionChoice {
        let tail = self.choice(tokens, text);
        let logprobs = match (head.logprobs, tail.logprobs) {
            (Some(mut head), Some(tail)) => {
                extend_logprobs(&mut head, tail);
                Some(head)
            }
            (head, tail) => head.or(tail),
        };
        CompletionChoice { text: head.text + &tail.text, logprobs, prompt_logprobs: head.prompt_logprobs, ..tail }
    }

    fn chunk(&self, choices: Vec<CompletionChoice>) -> CompletionChunk {
        self.frame.body("text_completion", choices, None)
    }
}

impl StreamFormat for CompletionFormat {
    type Chunk = CompletionChunk;

    /// One chunk per engine event, even when its text is empty (a partial UTF-8 character,
    /// EOS): clients time tokens by chunks. The prompt's echo goes in a chunk of its own first.
    fn on_tokens(&mut self, tokens: &[GeneratedToken], text: &str) -> Vec<CompletionChunk> {
        let mut chunks: Vec<CompletionChunk> = self.prompt_choice().map(|c| self.chunk(vec![c])).into_iter().collect();
        let choice = self.choice(tokens, text);
        chunks.push(self.chunk(vec![choice]));
        chunks
    }

    fn on_prompt_logprobs(&mut self, logprobs: Vec<PromptLogprob>) {
        self.scored.extend(logprobs);
    }

    fn on_finish(&mut self, reason: FinishReason, schema_errors: Option<Vec<String>>) -> Vec<CompletionChunk> {
        let mut chunks: Vec<CompletionChunk> = self.prompt_choice().map(|c| self.chunk(vec![c])).into_iter().collect();
        let choice = CompletionChoice {
            index: 0,
            text: String::new(),
            logprobs: None,
            finish_reason: Some(reason.as_str()),
            prompt_logprobs: None,
            extras: TokenExtras { schema_errors, ..TokenExtras::default() },
        };
        chunks.push(self.chunk(vec![choice]));
        chunks
    }

    fn usage_chunk(&self, usage: Usage) -> CompletionChunk {
        self.frame.body("text_completion", Vec::new(), Some(usage))
    }

    fn with_index(mut chunk: CompletionChunk, index: usize) -> CompletionChunk {
        chunk.choices.iter_mut().for_each(|c| c.index = index);
        chunk
    }
}

/// Completions layout: parallel arrays, top logprobs as `{token_text: logprob}` maps.
/// `text_offset` carries on across stream chunks.
pub fn completion_logprobs(engine: &Engine, tokens: &[GeneratedToken], text_offset: &mut usize) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for t in tokens {
        let text = token_text(engine, t.token_id);
        out.text_offset.push(*text_offset);
        *text_offset += text.len();
        out.token_logprobs.push(t.logprob.as_ref().map(|lp| f64::from(lp.logprob)));
        out.top_logprobs.push(
            t.logprob
                .as_ref()
                .map(|lp| lp.top_logprobs.iter().map(|&(id, p)| (token_text(engine, id), f64::from(p))).collect()),
        );
        out.tokens.push(text);
    }
    out
}
