//! Ollama's routes: `POST /api/chat`, `POST /api/generate`, `GET /api/tags`, `GET /api/ps`,
//! `POST /api/show`, `GET /api/version`.

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use entrobatch::Prompt;
use serde_json::{json, Value};

use super::convert::{chat_request, generate_request, Generate};
use super::error::OllamaError;
use super::protocol::{ChatBody, GenerateBody, ShowBody};
use super::reply::{created_at, Reply, Shape};
use super::response::{Chunk, ChunkBody, Details, ModelEntry, ModelList, ShowResponse, VersionResponse};
use crate::endpoints::chat::{parse_chat, ParsedChat, ReplyParser};
use crate::request::extract::ApiJson;
use crate::request::params::{engine_request, parse_common, parse_logprobs_pair};
use crate::response::error::ApiError;
use crate::response::TokenExtras;
use crate::state::AppState;

/// The Ollama version whose API these routes follow.
const OLLAMA_API_VERSION: &str = "0.12.0";

pub async fn chat(
    State(state): State<AppState>,
    body: Result<ApiJson<ChatBody>, ApiError>,
) -> Result<Response, OllamaError> {
    let ApiJson(body) = body?;
    let chat = parse_ollama_chat(&state, body)?;
    respond(state, chat, Shape::Chat).await
}

/// An `/api/chat` body as the chat request it makes, checked.
pub(crate) fn parse_ollama_chat(state: &AppState, body: ChatBody) -> Result<ParsedChat, ApiError> {
    state.check_model(Some(&body.model))?;
    parse_chat(chat_request(body)?, state)
}

pub async fn generate(
    State(state): State<AppState>,
    body: Result<ApiJson<GenerateBody>, ApiError>,
) -> Result<Response, OllamaError> {
    let ApiJson(body) = body?;
    state.check_model(Some(&body.model))?;
    match generate_request(body)? {
        Generate::Load => Ok(axum::response::IntoResponse::into_response(Json(Chunk {
            model: state.model_id.clone(),
            created_at: created_at(),
            body: ChunkBody::Generate { response: String::new(), thinking: None },
            done: true,
            done_reason: Some("load"),
            stats: None,
            logprobs: None,
            extras: TokenExtras::default(),
        }))),
        Generate::Chat(chat) => {
            let chat = parse_chat(*chat, &state)?;
            respond(state, chat, Shape::Generate).await
        }
        Generate::Raw { mut common, prompt, logprobs, top_logprobs } => {
            let logprobs = parse_logprobs_pair(logprobs, top_logprobs)?;
            let parsed = parse_common(&mut common, logprobs, &state.generation_defaults)?;
            let request = engine_request(Prompt::Text(prompt), parsed.params.clone(), parsed.max_tokens, None);
            let handle = state.submit(request).await?;
            let reply = Reply::new(
                state,
                Shape::Generate,
                ReplyParser::text_only(),
                logprobs.is_some(),
                parsed.params.return_metrics,
            );
            Ok(if parsed.stream { reply.stream(handle) } else { reply.whole(handle).await? })
        }
    }
}

async fn respond(state: AppState, chat: ParsedChat, shape: Shape) -> Result<Response, OllamaError> {
    chat.check_thinking(&state, "think")?;
    let handle = state.submit(chat.request()).await?;
    let parser = ReplyParser::new(&state, &chat, &handle);
    let reply = Reply::new(state, shape, parser, chat.logprobs.is_some(), chat.parsed.params.return_metrics);
    Ok(if chat.parsed.stream { reply.stream(handle) } else { reply.whole(handle).await? })
}

pub async fn tags(State(state): State<AppState>) -> Json<ModelList> {
    Json(ModelList { models: vec![entry(&state, None)] })
}

/// Loaded models: the one served, always loaded.
pub async fn ps(State(state): State<AppState>) -> Json<ModelList> {
    let context = state.engine.info().max_model_len;
    Json(ModelList { models: vec![entry(&state, Some(context))] })
}

pub async fn show(
    State(state): State<AppState>,
    body: Result<ApiJson<ShowBody>, ApiError>,
) -> Result<Json<ShowResponse>, OllamaError> {
    let ApiJson(body) = body?;
    let Some(model) = body.model.or(body.name) else {
        return Err(ApiError::invalid_param("model", "model is required").into());
    };
    state.check_model(Some(&model))?;
    let info = state.engine.info();
    let config = &info.model_config;
    let arch = config.architecture.name();
    let mut model_info = serde_json::Map::new();
    let mut put = |key: String, value: Value| {
        model_info.insert(key, value);
    };
    put("general.architecture".into(), json!(arch));
    put(format!("{arch}.context_length"), json!(info.max_model_len));
    put(format!("{arch}.embedding_length"), json!(config.hidden_size));
    put(format!("{arch}.block_count"), json!(config.num_layers));
    put(format!("{arch}.attention.head_count"), json!(config.num_heads));
    put(format!("{arch}.attention.head_count_kv"), json!(config.num_kv_heads));
    put(format!("{arch}.vocab_size"), json!(config.vocab_size));
    // Templates that cannot render tools get the generic tool-call format: every model calls tools.
    let mut capabilities = vec!["completion", "tools"];
    if state.thinking_template {
        capabilities.push("thinking");
    }
    Ok(Json(ShowResponse { modified_at: started_at(&state), details: details(&state), model_info, capabilities }))
}

pub async fn version() -> Json<VersionResponse> {
    Json(VersionResponse { version: OLLAMA_API_VERSION })
}

fn entry(state: &AppState, context_length: Option<usize>) -> ModelEntry {
    ModelEntry {
        name: state.model_id.clone(),
        model: state.model_id.clone(),
        modified_at: started_at(state),
        digest: state.fingerprint.clone(),
        details: details(state),
        context_length,
    }
}

fn details(state: &AppState) -> Details {
    let family = state.engine.info().model_config.architecture.name();
    Details { parent_model: "", format: "gguf", family, families: vec![family] }
}

/// When the server loaded the model, in Ollama's timestamp format.
fn started_at(state: &AppState) -> String {
    let at = i64::try_from(state.created).unwrap_or(0);
    chrono::DateTime::from_timestamp(at, 0).unwrap_or_default().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
