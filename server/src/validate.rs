//! The server's whole input check as one synchronous call: body bytes -> UTF-8 -> JSON ->
//! OpenAI fields -> engine request -> `Engine::prepare`. The POST
//! handlers run exactly these steps (through the same functions) before submitting; this
//! entry point exists so the fuzz target (fuzz/fuzz_targets/http_request.rs) and tests can
//! drive them without HTTP or an engine loop.

use entrobatch::GenerationParams;

use crate::endpoints::anthropic::{parse_messages, MessagesRequest};
use crate::endpoints::chat::parse_chat;
use crate::endpoints::chat::protocol::ChatRequest;
use crate::endpoints::completions::parse_completion;
use crate::endpoints::completions::protocol::CompletionRequest;
use crate::endpoints::ollama::{parse_ollama_chat, ChatBody};
use crate::request::extract::decode_json_body;
use crate::response::error::ApiError;
use crate::state::AppState;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    ChatCompletions,
    /// Anthropic's `/v1/messages`.
    Messages,
    /// Ollama's `/api/chat`.
    OllamaChat,
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
    let (request, stream) = match endpoint {
        Endpoint::Completions => {
            let req: CompletionRequest = decode_json_body(body)?;
            state.check_model(req.common.model.as_deref())?;
            let completion = parse_completion(req, &state.generation_defaults)?;
            // Every prompt is checked; the first one's request is what this reports.
            let mut requests = completion.requests().into_iter();
            let first = requests.next().ok_or_else(|| ApiError::internal("no prompts"))?;
            for other in requests {
                state.engine.prepare(other)?;
            }
            (first, completion.parsed.stream)
        }
        Endpoint::ChatCompletions => {
            let req: ChatRequest = decode_json_body(body)?;
            state.check_model(req.common.model.as_deref())?;
            let chat = parse_chat(req, state)?;
            (chat.request(), chat.parsed.stream)
        }
        Endpoint::Messages => {
            let chat = parse_messages(state, decode_json_body::<MessagesRequest>(body)?)?;
            (chat.request(), chat.parsed.stream)
        }
        Endpoint::OllamaChat => {
            let chat = parse_ollama_chat(state, decode_json_body::<ChatBody>(body)?)?;
            (chat.request(), chat.parsed.stream)
        }
    };
    let prepared = state.engine.prepare(request)?;
    Ok(ValidatedRequest {
        prompt_token_ids: prepared.prompt_token_ids().to_vec(),
        params: prepared.params().clone(),
        stream,
    })
}
