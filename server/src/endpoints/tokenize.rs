//! `POST /tokenize` and `POST /detokenize` in vLLM's shapes and llama-server's (`content`,
//! `add_special`, `with_pieces`; `content` in the reply): what a client needs to count tokens
//! the way the engine will, without generating.

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
    /// llama-server's name for `prompt`; its special tokens are added only with `add_special`.
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    add_special: Option<bool>,
    /// llama-server: `tokens` as `{"id", "piece"}` objects.
    #[serde(default)]
    with_pieces: Option<bool>,
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
    pub tokens: Tokens,
    /// `null` unless `return_token_strs`.
    pub token_strs: Option<Vec<String>>,
}

/// Ids, or with llama-server's `with_pieces` each id with its text.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Tokens {
    Ids(Vec<u32>),
    Pieces(Vec<Piece>),
}

#[derive(Debug, Serialize)]
pub struct Piece {
    pub id: u32,
    pub piece: String,
}

/// The text under vLLM's name (`prompt`) and llama-server's (`content`).
#[derive(Debug, Serialize)]
pub struct DetokenizeResponse {
    pub prompt: String,
    pub content: String,
}

pub async fn tokenize(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<TokenizeRequest>,
) -> Result<Json<TokenizeResponse>, ApiError> {
    state.check_model(req.model.as_deref())?;
    let engine = state.engine.clone();
    if req.add_special.is_some() && req.content.is_none() {
        return Err(ApiError::invalid_param(
            "add_special",
            "`add_special` goes with `content` (`prompt` takes `add_special_tokens`)",
        ));
    }
    if req.add_special_tokens.is_some() && req.content.is_some() {
        return Err(ApiError::invalid_param("add_special_tokens", "`content` takes `add_special`"));
    }
    let encode = |field: &'static str, text: &str, special: bool| {
        engine.tokenizer().encode(text, special).map_err(|e| ApiError::invalid_param(field, e.to_string()))
    };
    let ids = match (req.prompt, req.content, req.messages) {
        (Some(text), None, None) => encode("prompt", &text, req.add_special_tokens.unwrap_or(true))?,
        (None, Some(text), None) => encode("content", &text, req.add_special.unwrap_or(false))?,
        (None, None, Some(messages)) => {
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
        _ => return Err(ApiError::bad_request("send exactly one of `prompt`, `content` and `messages`")),
    };
    let piece = |id: u32| engine.tokenizer().decode(&[id], false).unwrap_or_default();
    let token_strs = (req.return_token_strs == Some(true))
        .then(|| ids.iter().map(|&id| engine.tokenizer().id_to_token(id).unwrap_or_default()).collect());
    let count = ids.len();
    let tokens = if req.with_pieces == Some(true) {
        Tokens::Pieces(ids.into_iter().map(|id| Piece { id, piece: piece(id) }).collect())
    } else {
        Tokens::Ids(ids)
    };
    Ok(Json(TokenizeResponse { count, max_model_len: engine.info().max_model_len, tokens, token_strs }))
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
    Ok(Json(DetokenizeResponse { content: text.clone(), prompt: text }))
}
