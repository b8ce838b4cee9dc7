//! Errors in Ollama's shape, `{"error": "..."}` with the status the `ApiError` carries (the
//! `ollama` client raises `ResponseError` with both).

use axum::response::{IntoResponse, Response};
use axum::Json;

use super::response::ErrorBody;
use crate::response::error::ApiError;

pub struct OllamaError(pub ApiError);

impl From<ApiError> for OllamaError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl IntoResponse for OllamaError {
    fn into_response(self) -> Response {
        let mut response = (self.0.status, Json(ErrorBody { error: self.0.message_with_param() })).into_response();
        if let Some(seconds) = self.0.retry_after {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}
