//! `POST /v1/completions`.

use crate::{FinishReason, GeneratedToken, Prompt, PromptLogprob, Request, RequestHandle};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::collect::collect_choices;
use super::defaults::GenerationDefaults;
use super::echo::{echo_logprobs, extend_logprobs, vllm_prompt_logprobs, PromptEcho};
use super::error::ApiError;
use super::extract::ApiJson;
use super::format::{completion_logprobs, Extras, Frame};
use super::params::{completion_prompts, engine_request, parse_common, parse_logprobs, refuse_unknown, ParsedParams};
use super::protocol::CompletionRequest;
use super::response::{Completion, CompletionChoice, CompletionChunk, CompletionLogprobs, TokenExtras, Usage};
use super::state::AppState;
use super::stream::{sse_response, StreamFormat};

/// OpenAI's default when `max_tokens` is absent.
pub(super) const DEFAULT_MAX_TOKENS: usize = 16;

/// A completions body that passed every check: its prompts, parameters and what to return.
pub(super) struct ParsedCompletion {
    pub prompts: Vec<Prompt>,
    pub parsed: ParsedParams,
    pub logprobs: Option<usize>,
    echo: bool,
    /// `echo` with `logprobs`: the prompt's tokens lead the logprobs arrays.
    echoed_logprobs: bool,
    prompt_logprobs: bool,
}

/// Everything a completions body must pass before it reaches the engine.
pub(super) fn parse_completion(
    mut req: CompletionRequest,
    defaults: &GenerationDefaults,
) -> Result<ParsedCompletion, ApiError> {
    refuse_unknown(&req.unknown)?;
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid_param("suffix", "suffix is not supported"));
    }
    let logprobs = parse_logprobs("logprobs", req.logprobs)?;
    let prompt_logprobs = parse_logprobs("prompt_logprobs", req.prompt_logprobs)?;
    let mut parsed = parse_common(&mut req.common, logprobs, defaults)?;
    let prompts = completion_prompts(req.prompt)?;
    let echo = req.echo == Some(true);
    // The prompt is scored when its logprobs are to be shown, and for an echo of nothing but
    // the prompt (`max_tokens: 0`), which the engine runs as a scoring-only request.
    let echoed_logprobs = logprobs.filter(|_| echo);
    let echo_only = (echo && parsed.max_tokens == Some(0)).then_some(0);
    parsed.params.prompt_logprobs = [echoed_logprobs, prompt_logprobs, echo_only].into_iter().flatten().max();
    Ok(ParsedCompletion {
        prompts,
        parsed,
        logprobs,
        echo,
        echoed_logprobs: echoed_logprobs.is_some(),
        prompt_logprobs: prompt_logprobs.is_some(),
    })
}

impl ParsedCompletion {
    /// The engine request of each prompt; the server submits `n` copies of each, prompt-major
    /// (OpenAI's choice order), copy `i` of a seeded request drawing from `seed + i`.
    pub fn requests(&self) -> Vec<Request> {
        let (params, max_tokens) = (&self.parsed.params, self.parsed.max_tokens);
        self.prompts
            .iter()
            .map(|prompt| engine_request(prompt.clone(), params.clone(), max_tokens, Some(DEFAULT_MAX_TOKENS)))
            .collect()
    }

    /// What to return of prompt `index` (a token-id prompt's text is decoded).
    fn echo_for(&self, state: &AppState, index: usize, prompt_token_ids: &[u32]) -> PromptEcho {
        let text = self.echo.then(|| match &self.prompts[index] {
            Prompt::Text(text) => text.clone(),
            _ => state.engine.tokenizer().decode(prompt_token_ids, false).unwrap_or_default(),
        });
        PromptEcho { text, logprobs: self.echoed_logprobs, prompt_logprobs: self.prompt_logprobs }
    }
}

pub async fn completions(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    state.check_model(req.common.model.as_deref())?;
    let completion = parse_completion(req, &state.generation_defaults)?;
    let handles = state.submit_copies(completion.requests(), completion.parsed.n).await?;
    let n = completion.parsed.n;
    let frame_id = handles.first().map_or(0, |h| h.id);
    let extras = Extras {
        return_metrics: completion.parsed.params.return_metrics,
        return_token_ids: completion.parsed.return_token_ids,
    };
    let choices: Vec<(RequestHandle, CompletionFormat)> = handles
        .into_iter()
        .enumerate()
        .map(|(i, handle)| {
            let format = CompletionFormat {
                frame: Frame::new(&state, "cmpl", frame_id),
                logprobs: completion.logprobs.is_some(),
                extras,
                text_offset: 0,
                prompt_token_ids: handle.prompt_token_ids.clone(),
                echo: completion.echo_for(&state, i / n, &handle.prompt_token_ids),
                scored: Vec::new(),
            };
            (handle, format)
        })
        .collect();
    if completion.parsed.stream {
        return Ok(sse_response(choices, n, completion.parsed.include_usage));
    }
    let (outputs, usage) = collect_choices(choices, n).await?;
    let mut body_choices = Vec::with_capacity(outputs.len());
    let mut frame = None;
    for (index, (output, mut format)) in outputs.into_iter().enumerate() {
        format.scored = output.prompt_logprobs;
        let choice = format.prompt_choice().unwrap_or_else(|| format.choice(&[], ""));
        let choice = format.append(choice, &output.tokens, &output.text);
        body_choices.push(CompletionChoice { index, finish_reason: Some(output.finish_reason.as_str()), ..choice });
        frame.get_or_insert(format.frame);
    }
    let Some(frame) = frame else { return Err(ApiError::internal("no choices")) };
    let body: Completion = frame.body("text_completion", body_choices, Some(usage));
    Ok(Json(body).into_response())
}

struct CompletionFormat {
    frame: Frame,
    logprobs: bool,
    extras: Extras,
    text_offset: usize,
    prompt_token_ids: Vec<u32>,
    /// What to return of the prompt; taken by the first choice that carries it.
    echo: PromptEcho,
    /// Prompt logprobs received so far.
    scored: Vec<PromptLogprob>,
}

impl CompletionFormat {
    fn choice(&mut self, tokens: &[GeneratedToken], text: &str) -> CompletionChoice {
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
    fn prompt_choice(&mut self) -> Option<CompletionChoice> {
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
    fn append(&mut self, head: CompletionChoice, tokens: &[GeneratedToken], text: &str) -> CompletionChoice {
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

    fn on_finish(&mut self, reason: FinishReason) -> Vec<CompletionChunk> {
        let mut chunks: Vec<CompletionChunk> = self.prompt_choice().map(|c| self.chunk(vec![c])).into_iter().collect();
        let choice = CompletionChoice {
            index: 0,
            text: String::new(),
            logprobs: None,
            finish_reason: Some(reason.as_str()),
            prompt_logprobs: None,
            extras: TokenExtras::default(),
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
