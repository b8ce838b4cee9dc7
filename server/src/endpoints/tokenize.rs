//! vLLM's `POST /tokenize` and `POST /detokenize`: what a client needs to count tokens the
//! way the engine will, without generating.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::chat::messages::chat_message;
use super::chat::protocol::MessageIn;
use crate::request::extract::ApiJson;
use crate::response::error::ApiError;
use crate::state::AppState;
use entrobatch::{GenerationParams, Prompt};

/// Text, or chat messages rendered through the template as `/v1/chat/completions` does.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizeRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    messages: Option<Vec<MessageIn>>,
    /// Text only (the chat template writes its own special tokens); default true.
    #[serde(default)]
    add_special_tokens: Option<bool>,
    #[serde(default)]
    return_token_strs: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetokenizeRequest {
    #[serde(default)]
    model: Option<String>,
    tokens: Vec<u32>,
}

#[derive(Debug, Serialize)]
pub struct TokenizeResponse {
    pub count: usize,
    pub max_model_len: usize,
    pub tokens: Vec<u32>,
    /// `null` unless `return_token_strs`.
    pub token_strs: Option<Vec<String>>,
}

#[derive(Debug, Serialize)]
pub struct DetokenizeResponse {
    pub prompt: String,
}

pub async fn tokenize(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<TokenizeRequest>,
) -> Result<Json<TokenizeResponse>, ApiError> {
    state.check_model(req.model.as_deref())?;
    let engine = state.engine.clone();
    let ids = match (req.prompt, req.messages) {
        (Some(text), None) => engine
            .tokenizer()
            .encode(&text, req.add_special_tokens.unwrap_or(true))
            .map_err(|e| ApiError::invalid_param("prompt", e.to_string()))?,
        (None, Some(messages)) => {
            if req.add_special_tokens == Some(true) {
                return Err(ApiError::invalid_param(
                    "add_special_tokens",
                    "the chat template writes the special tokens of messages",
                ));
            }
            let messages =
                messages.into_iter().enumerate().map(|(i, m)| chat_message(i, m)).collect::<Result<Vec<_>, _>>()?;
            engine.tokenize_prompt(&Prompt::Chat(messages), &GenerationParams::default()).map_err(ApiError::from)?
        }
        _ => return Err(ApiError::bad_request("send exactly one of `prompt` and `messages`")),
    };
    let token_strs = (req.return_token_strs == Some(true))
        .then(|| ids.iter().map(|&id| engine.tokenizer().id_to_token(id).unwrap_or_default()).collect());
    Ok(Json(TokenizeResponse { count: ids.len(), max_model_len: engine.info().max_model_len, tokens: ids, token_strs }))
}

pub async fn detokenize(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<DetokenizeRequest>,
) -> Result<Json<DetokenizeResponse>, ApiError> {
    state.check_model(req.model.as_deref())?;
    let vocab = state.engine.info().model_config.vocab_size;
    if let Some(bad) = req.tokens.iter().find(|&&id| id as usize >= vocab) {
        return Err(ApiError::invalid_param("tokens", format!("token id {bad} is outside the vocabulary of {vocab}")));
    }
    let text = state.engine.tokenizer().decode(&req.tokens, false).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Json(DetokenizeResponse { prompt: text }))
}
