//! `POST /v1/completions`.

use crate::{FinishReason, GeneratedToken, Prompt};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::defaults::GenerationDefaults;
use super::error::ApiError;
use super::extract::ApiJson;
use super::format::{completion_logprobs, Extras, Frame};
use super::params::{completion_prompt, engine_request, parse_common, parse_logprobs, refuse_unknown, ParsedParams};
use super::protocol::CompletionRequest;
use super::response::{Completion, CompletionChoice, CompletionChunk, TokenExtras, Usage};
use super::state::AppState;
use super::stream::{sse_response, StreamFormat};

/// OpenAI's default when `max_tokens` is absent.
pub(super) const DEFAULT_MAX_TOKENS: usize = 16;

/// Everything a completions body must pass before it reaches the engine: the prompt, the
/// parsed parameters and the logprobs count.
pub(super) fn parse_completion(
    mut req: CompletionRequest,
    defaults: &GenerationDefaults,
) -> Result<(Prompt, ParsedParams, Option<usize>), ApiError> {
    refuse_unknown(&req.unknown)?;
    if req.echo == Some(true) {
        return Err(ApiError::invalid_param("echo", "echo is not supported"));
    }
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid_param("suffix", "suffix is not supported"));
    }
    let logprobs = parse_logprobs("logprobs", req.logprobs)?;
    let parsed = parse_common(&mut req.common, logprobs, defaults)?;
    Ok((completion_prompt(req.prompt)?, parsed, logprobs))
}

pub async fn completions(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    state.check_model(req.common.model.as_deref())?;
    let (prompt, parsed, logprobs) = parse_completion(req, &state.generation_defaults)?;
    let return_metrics = parsed.params.return_metrics;
    let request = engine_request(prompt, parsed.params, parsed.max_tokens, Some(DEFAULT_MAX_TOKENS));
    let handle = state.submit(request).await?;
    let format = CompletionFormat {
        frame: Frame::new(&state, "cmpl", handle.id),
        logprobs: logprobs.is_some(),
        extras: Extras { return_metrics, return_token_ids: parsed.return_token_ids },
        text_offset: 0,
    };
    if parsed.stream {
        return Ok(sse_response(handle, format, parsed.include_usage));
    }
    let mut format = format;
    let output = handle.collect_async().await;
    if output.finish_reason == FinishReason::Error {
        return Err(ApiError::internal(output.error.unwrap_or_else(|| "generation failed".into())));
    }
    let choice = CompletionChoice {
        finish_reason: Some(output.finish_reason.as_str()),
        ..format.choice(&output.tokens, &output.text)
    };
    let usage = Usage::new(output.prompt_token_ids.len(), output.cached_tokens, output.token_ids.len());
    let body: Completion = format.frame.body("text_completion", vec![choice], Some(usage));
    Ok(Json(body).into_response())
}

struct CompletionFormat {
    frame: Frame,
    logprobs: bool,
    extras: Extras,
    text_offset: usize,
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
            extras: self.extras.for_tokens(tokens),
        }
    }

    fn chunk(&self, choices: Vec<CompletionChoice>) -> CompletionChunk {
        self.frame.body("text_completion", choices, None)
    }
}

impl StreamFormat for CompletionFormat {
    type Chunk = CompletionChunk;

    /// One chunk per engine event, even when its text is empty (a partial UTF-8 character,
    /// EOS): clients time tokens by chunks.
    fn on_tokens(&mut self, tokens: &[GeneratedToken], text: &str) -> Vec<CompletionChunk> {
        let choice = self.choice(tokens, text);
        vec![self.chunk(vec![choice])]
    }

    fn on_finish(&mut self, reason: FinishReason) -> Vec<CompletionChunk> {
        let choice = CompletionChoice {
            index: 0,
            text: String::new(),
            logprobs: None,
            finish_reason: Some(reason.as_str()),
            extras: TokenExtras::default(),
        };
        vec![self.chunk(vec![choice])]
    }

    fn usage_chunk(&self, usage: Usage) -> CompletionChunk {
        self.frame.body("text_completion", Vec::new(), Some(usage))
    }
}
