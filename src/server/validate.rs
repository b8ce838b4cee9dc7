//! The server's whole input check as one synchronous call: body bytes -> UTF-8 -> JSON ->
//! OpenAI fields -> engine parameters -> tokenized prompt -> `Engine::validate`. The POST
//! handlers run exactly these steps (through the same functions) before submitting; this
//! entry point exists so the fuzz target (fuzz/fuzz_targets/http_request.rs) and tests can
//! drive them without HTTP or an engine loop.

use crate::{GenerationParams, Prompt};

use super::chat::parse_chat;
use super::completions::{parse_completion, DEFAULT_MAX_TOKENS};
use super::error::ApiError;
use super::extract::decode_json_body;
use super::protocol::{ChatRequest, CompletionRequest};
use super::state::{prepare, AppState, DefaultMaxTokens};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    ChatCompletions,
}

/// A body the server would accept and submit.
#[derive(Debug)]
pub struct ValidatedRequest {
    pub prompt_token_ids: Vec<u32>,
    pub params: GenerationParams,
    pub stream: bool,
}

/// What `POST endpoint` with `body` would submit, or the error response it would send
/// (before the size limit, which axum enforces while reading the body).
pub fn validate_body(state: &AppState, endpoint: Endpoint, body: &[u8]) -> Result<ValidatedRequest, ApiError> {
    let (prompt, parsed, default_max) = match endpoint {
        Endpoint::Completions => {
            let req: CompletionRequest = decode_json_body(body)?;
            state.check_model(req.common.model.as_deref())?;
            let (prompt, parsed, _) = parse_completion(req)?;
            (prompt, parsed, DefaultMaxTokens::Fixed(DEFAULT_MAX_TOKENS))
        }
        Endpoint::ChatCompletions => {
            let req: ChatRequest = decode_json_body(body)?;
            state.check_model(req.common.model.as_deref())?;
            let (messages, parsed, _) = parse_chat(req)?;
            (Prompt::Chat(messages), parsed, DefaultMaxTokens::RestOfContext)
        }
    };
    let mut params = parsed.params;
    let ids = prepare(&state.engine, &prompt, &mut params, parsed.max_tokens, default_max)?;
    state.engine.validate(&params, ids.len())?;
    Ok(ValidatedRequest { prompt_token_ids: ids, params, stream: parsed.stream })
}
