//! OpenAI-style error responses: `{"error": {"message", "type", "param", "code"}}` with a
//! 4xx/5xx status. Every rejection the server makes goes through [`ApiError`].

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use entrobatch::structured::StructuredError;
use entrobatch::EngineError;

use super::{ErrorBody, ErrorDetail};

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds for a `Retry-After` header: the refusal is about load, not about the request.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), kind, param: None, code: None, retry_after: None }
    }

    /// 400 for a request the client must change.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 naming the offending field.
    pub fn invalid_param(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self { param: Some(param.into()), ..Self::bad_request(message) }
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found_error", message)
    }

    /// The message naming the offending field, for error bodies without a `param` of their
    /// own (Anthropic's, Ollama's).
    pub fn message_with_param(&self) -> String {
        match &self.param {
            Some(param) if !self.message.contains(param.as_str()) => format!("{param}: {}", self.message),
            _ => self.message.clone(),
        }
    }

    /// The JSON body, also sent as an SSE `data:` line when a stream fails midway.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                message: self.message.clone(),
                kind: self.kind,
                param: self.param.clone(),
                code: self.code,
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let message = e.to_string();
        match e {
            EngineError::Strategy(_) => Self::invalid_param("decoding", message).with_code("invalid_decoding"),
            EngineError::InvalidRequest { field, .. } => Self::invalid_param(field, message),
            EngineError::MessageRejected { index, .. } => Self::invalid_param(format!("messages[{index}]"), message),
            EngineError::NeverFits { .. } => {
                Self::invalid_param("max_tokens", message).with_code("context_length_exceeded")
            }
            EngineError::Structured(StructuredError::TooLarge { .. }) => {
                Self::invalid_param("response_format", message).with_code("grammar_too_large")
            }
            EngineError::Structured(StructuredError::CompileTimeout { .. }) => {
                Self::invalid_param("response_format", message).with_code("grammar_compile_timeout")
            }
            // Other requests' grammars held every compile slot: load, gone in seconds.
            EngineError::Structured(StructuredError::CompilerBusy { .. }) => {
                Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message)
                    .with_code("grammar_compiler_busy")
                    .with_retry_after(1)
            }
            EngineError::Structured(e) if e.is_client_error() => {
                Self::invalid_param("response_format", message).with_code("invalid_structured_output")
            }
            EngineError::Structured(_) => Self::internal(message),
            // The queue drains in about `retry_after`; a balancer can send it elsewhere now.
            EngineError::WouldMissTtft(miss) => {
                let retry_after = miss.retry_after.as_secs().max(1);
                Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message)
                    .with_code("ttft_target_unreachable")
                    .with_retry_after(retry_after)
            }
            EngineError::QueueFull(_) => {
                // A slot frees as soon as any running request finishes: seconds, not minutes.
                Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message)
                    .with_code("queue_full")
                    .with_retry_after(1)
            }
            // A prompt the tokenizer or the chat template cannot render is the client's input.
            EngineError::Tokenizer(_) => Self::bad_request(message),
            // Draining: another replica (or this one after a restart) can take it.
            EngineError::ShutDown => Self::unavailable(message).with_retry_after(1),
            EngineError::Model(_) | EngineError::Scheduler(_) | EngineError::Config(_) => Self::internal(message),
        }
    }
}
