//! `POST /v1/completions`.

use crate::{FinishReason, GeneratedToken, Prompt, PromptLogprob};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::defaults::GenerationDefaults;
use super::echo::{echo_logprobs, extend_logprobs, vllm_prompt_logprobs, PromptEcho};
use super::error::ApiError;
use super::extract::ApiJson;
use super::format::{completion_logprobs, Extras, Frame};
use super::params::{completion_prompt, engine_request, parse_common, parse_logprobs, refuse_unknown, ParsedParams};
use super::protocol::CompletionRequest;
use super::response::{Completion, CompletionChoice, CompletionChunk, CompletionLogprobs, TokenExtras, Usage};
use super::state::AppState;
use super::stream::{sse_response, StreamFormat};

/// OpenAI's default when `max_tokens` is absent.
pub(super) const DEFAULT_MAX_TOKENS: usize = 16;

/// Everything a completions body must pass before it reaches the engine: the prompt, the
/// parsed parameters, the logprobs count and what to return of the prompt.
pub(super) fn parse_completion(
    mut req: CompletionRequest,
    defaults: &GenerationDefaults,
) -> Result<(Prompt, ParsedParams, Option<usize>, PromptEcho), ApiError> {
    refuse_unknown(&req.unknown)?;
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid_param("suffix", "suffix is not supported"));
    }
    let logprobs = parse_logprobs("logprobs", req.logprobs)?;
    let prompt_logprobs = parse_logprobs("prompt_logprobs", req.prompt_logprobs)?;
    let mut parsed = parse_common(&mut req.common, logprobs, defaults)?;
    let prompt = completion_prompt(req.prompt)?;
    let echo = req.echo == Some(true);
    // The prompt is scored when its logprobs are to be shown, and for an echo of nothing but
    // the prompt (`max_tokens: 0`), which the engine runs as a scoring-only request.
    let echoed_logprobs = logprobs.filter(|_| echo);
    let echo_only = (echo && parsed.max_tokens == Some(0)).then_some(0);
    parsed.params.prompt_logprobs = [echoed_logprobs, prompt_logprobs, echo_only].into_iter().flatten().max();
    let prompt_echo = PromptEcho {
        text: echo.then(|| match &prompt {
            Prompt::Text(text) => text.clone(),
            _ => String::new(),
        }),
        logprobs: echoed_logprobs.is_some(),
        prompt_logprobs: prompt_logprobs.is_some(),
    };
    Ok((prompt, parsed, logprobs, prompt_echo))
}

pub async fn completions(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    state.check_model(req.common.model.as_deref())?;
    let (prompt, parsed, logprobs, mut echo) = parse_completion(req, &state.generation_defaults)?;
    let return_metrics = parsed.params.return_metrics;
    let token_prompt = !matches!(prompt, Prompt::Text(_));
    let request = engine_request(prompt, parsed.params, parsed.max_tokens, Some(DEFAULT_MAX_TOKENS));
    let handle = state.submit(request).await?;
    if let (Some(text), true) = (echo.text.as_mut(), token_prompt) {
        *text = state.engine.tokenizer().decode(&handle.prompt_token_ids, false).unwrap_or_default();
    }
    let format = CompletionFormat {
        frame: Frame::new(&state, "cmpl", handle.id),
        logprobs: logprobs.is_some(),
        extras: Extras { return_metrics, return_token_ids: parsed.return_token_ids },
        text_offset: 0,
        prompt_token_ids: handle.prompt_token_ids.clone(),
        echo,
        scored: Vec::new(),
    };
    if parsed.stream {
        return Ok(sse_response(handle, format, parsed.include_usage));
    }
    let mut format = format;
    let output = handle.collect_async().await;
    if output.finish_reason == FinishReason::Error {
        return Err(ApiError::internal(output.error.unwrap_or_else(|| "generation failed".into())));
    }
    format.scored = output.prompt_logprobs;
    let choice = format.prompt_choice().unwrap_or_else(|| format.choice(&[], ""));
    let choice = format.append(choice, &output.tokens, &output.text);
    let choice = CompletionChoice { finish_reason: Some(output.finish_reason.as_str()), ..choice };
    let usage = Usage::new(output.prompt_token_ids.len(), output.cached_tokens, output.token_ids.len());
    let body: Completion = format.frame.body("text_completion", vec![choice], Some(usage));
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
}
