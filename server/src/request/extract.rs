//! The JSON body extractor: content type (415), size limit (413), UTF-8 (400), then JSON
//! (400), each with an OpenAI-style error body instead of axum's plain-text rejections.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::response::error::ApiError;

pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        check_content_type(req.headers())?;
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "invalid_request_error", "request body too large")
                    .with_code("body_too_large")
            } else {
                ApiError::bad_request(format!("cannot read the request body: {}", rejection.body_text()))
            }
        })?;
        decode_json_body(&bytes).map(ApiJson)
    }
}

/// A body must say it is JSON (415 otherwise): a form or `text/plain` post is what a web page
/// on another origin can send without a CORS preflight, so refusing it keeps such pages from
/// driving a local server.
fn check_content_type(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    let value = headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let mime = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json")) {
        return Ok(());
    }
    let shown = if value.is_empty() { "no Content-Type" } else { value };
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "invalid_request_error",
        format!("the body must be JSON sent as `Content-Type: application/json`, got {shown}"),
    )
    .with_code("unsupported_media_type"))
}

/// UTF-8 (400), then JSON (400): the body checks after the size limit, shared with
/// `validate_body` (and through it the fuzz target).
pub fn decode_json_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        ApiError::bad_request(format!("request body is not valid UTF-8: {e}")).with_code("invalid_utf8")
    })?;
    // Known fields of the wrong type fail here, named by their path; unknown top-level
    // fields are kept for each endpoint to refuse or accept (`INERT_FIELDS`).
    let mut body = serde_json::Deserializer::from_str(text);
    let invalid = |message: String| ApiError::bad_request(message).with_code("invalid_json");
    let value = serde_path_to_error::deserialize(&mut body).map_err(|e| {
        let at = match e.path().to_string() {
            path if path == "." => String::new(),
            path => format!(" at `{path}`"),
        };
        invalid(format!("invalid JSON body{at}: {}", e.inner()))
    })?;
    body.end().map_err(|e| invalid(format!("invalid JSON body: {e}")))?;
    Ok(value)
}
