//! Errors in Anthropic's shape: the same `ApiError` every route raises, with the error type
//! Anthropic's SDK expects for its status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::response::{ErrorBody, ErrorDetail};
use crate::response::error::ApiError;

pub struct AnthropicError(pub ApiError);

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

/// Anthropic's error type for a status (its API's documented pairs).
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// The error detail, also sent as an `error` event when a stream fails midway.
pub fn detail(e: &ApiError) -> ErrorDetail {
    ErrorDetail { kind: error_type(e.status), message: e.message_with_param() }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let body = ErrorBody { kind: "error", error: detail(&self.0) };
        let mut response = (self.0.status, Json(body)).into_response();
        if let Some(seconds) = self.0.retry_after {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}
