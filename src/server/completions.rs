//! `POST /v1/completions`.

use crate::{FinishReason, GeneratedToken, Prompt};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::defaults::GenerationDefaults;
use super::error::ApiError;
use super::extract::ApiJson;
use super::format::{completion_logprobs, Extras};
use super::params::{completion_prompt, engine_request, parse_common, parse_logprobs, refuse_unknown, ParsedParams};
use super::protocol::CompletionRequest;
use super::state::AppState;
use super::stream::{sse_response, usage_json, StreamFormat};

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
        state: state.clone(),
        id: state.response_id("cmpl", handle.id),
        created: super::state::unix_now(),
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
    let mut choice = format.choice(&output.tokens, &output.text);
    choice.insert("finish_reason".into(), json!(output.finish_reason.as_str()));
    let body = json!({
        "id": format.id,
        "object": "text_completion",
        "created": format.created,
        "model": state.model_id,
        "system_fingerprint": state.fingerprint,
        "choices": [Value::Object(choice)],
        "usage": usage_json(output.prompt_token_ids.len(), output.cached_tokens, output.token_ids.len()),
    });
    Ok(Json(body).into_response())
}

struct CompletionFormat {
    state: AppState,
    id: String,
    created: u64,
    logprobs: bool,
    extras: Extras,
    text_offset: usize,
}

impl CompletionFormat {
    fn choice(&mut self, tokens: &[GeneratedToken], text: &str) -> Map<String, Value> {
        let mut choice = Map::new();
        choice.insert("index".into(), json!(0));
        choice.insert("text".into(), json!(text));
        let logprobs = if self.logprobs {
            completion_logprobs(&self.state.engine, tokens, &mut self.text_offset)
        } else {
            Value::Null
        };
        choice.insert("logprobs".into(), logprobs);
        choice.insert("finish_reason".into(), Value::Null);
        self.extras.apply(tokens, &mut choice);
        choice
    }

    fn chunk(&self, choices: Vec<Value>) -> Value {
        json!({
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.state.model_id,
            "system_fingerprint": self.state.fingerprint,
            "choices": choices,
        })
    }
}

impl StreamFormat for CompletionFormat {
    /// One chunk per engine event, even when its text is empty (a partial UTF-8 character,
    /// EOS): clients time tokens by chunks.
    fn on_tokens(&mut self, tokens: &[GeneratedToken], text: &str) -> Vec<Value> {
        let choice = self.choice(tokens, text);
        vec![self.chunk(vec![Value::Object(choice)])]
    }

    fn on_finish(&mut self, reason: FinishReason) -> Vec<Value> {
        let choice = json!({ "index": 0, "text": "", "logprobs": null, "finish_reason": reason.as_str() });
        vec![self.chunk(vec![choice])]
    }

    fn usage_chunk(&self, usage: Value) -> Value {
        let mut chunk = self.chunk(Vec::new());
        chunk["usage"] = usage;
        chunk
    }
}
