//! The playground: `GET /` serves one self-contained page (HTML, CSS and plain JavaScript
//! compiled into the binary, so `entrobatch serve` needs no static directory and no Node
//! build step), and `GET /playground/info` tells it what this model can do.
//!
//! The page talks only to the public OpenAI endpoints (streaming, `return_metrics`), so
//! whatever it shows is what any client gets; the info route exists because whether WeDLM
//! is usable depends on the checkpoint (a mask token), which no OpenAI route reports.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use crate::state::AppState;

#[derive(Debug, Serialize)]
pub struct PlaygroundInfo {
    pub model: String,
    pub max_model_len: usize,
    /// WeDLM fills `[MASK]` windows; an ordinary checkpoint has no mask token and the engine
    /// would reject the request, so the page greys the option out instead.
    pub wedlm: bool,
    /// Without one the chat endpoint falls back to ChatML, which may not be what the model
    /// was trained on; the page says so next to its chat switch.
    pub chat_template: bool,
}

/// The page itself; `playground.html` is kept as a real HTML file so it can be edited and
/// opened in an editor with highlighting.
pub const PAGE: &str = include_str!("playground.html");

/// `GET /`: the page. `no-cache` so a rebuilt server is never hidden behind a stale page.
pub async fn page() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")], PAGE).into_response()
}

/// `GET /playground/info`: the served model's id and which page features it supports.
pub async fn info(State(state): State<AppState>) -> Json<PlaygroundInfo> {
    let engine_info = state.engine.info();
    Json(PlaygroundInfo {
        model: state.model_id.clone(),
        max_model_len: engine_info.max_model_len,
        wedlm: engine_info.model_config.mask_token_id.is_some(),
        chat_template: state.engine.tokenizer().chat_template.is_some(),
    })
}
