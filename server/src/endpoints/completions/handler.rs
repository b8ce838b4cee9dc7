//! `POST /v1/completions`: the checks a body passes before the engine, the engine requests it
//! becomes (`n` copies of each prompt), and the response, whole or streamed.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use entrobatch::{Prompt, Request, RequestHandle};

use super::echo::PromptEcho;
use super::format::CompletionFormat;
use super::protocol::{completion_prompts, CompletionRequest};
use super::response::{Completion, CompletionChoice};
use crate::request::defaults::GenerationDefaults;
use crate::request::extract::ApiJson;
use crate::request::params::{engine_request, parse_common, parse_logprobs, refuse_unknown, ParsedParams};
use crate::response::collect::collect_choices;
use crate::response::error::ApiError;
use crate::response::format::{Extras, Frame};
use crate::response::stream::sse_response;
use crate::state::AppState;

/// OpenAI's default when `max_tokens` is absent.
const DEFAULT_MAX_TOKENS: usize = 16;

/// A completions body that passed every check: its prompts, parameters and what to return.
pub(crate) struct ParsedCompletion {
    pub prompts: Vec<Prompt>,
    pub parsed: ParsedParams,
    pub logprobs: Option<usize>,
    echo: bool,
    /// `echo` with `logprobs`: the prompt's tokens lead the logprobs arrays.
    echoed_logprobs: bool,
    prompt_logprobs: bool,
}

/// Everything a completions body must pass before it reaches the engine.
pub(crate) fn parse_completion(
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
        let mut choice = CompletionChoice { index, finish_reason: Some(output.finish_reason.as_str()), ..choice };
        choice.extras.schema_errors = output.schema_errors;
        body_choices.push(choice);
        frame.get_or_insert(format.frame);
    }
    let Some(frame) = frame else { return Err(ApiError::internal("no choices")) };
    let body: Completion = frame.body("text_completion", body_choices, Some(usage));
    Ok(Json(body).into_response())
}
