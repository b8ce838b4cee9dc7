//! Liveness and readiness, as a load balancer or Kubernetes probes them: `/health` answers
//! while the process serves HTTP; `/ready` only while a new request would be taken.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use entrobatch::EngineError;
use serde::Serialize;

use crate::response::error::ApiError;
use crate::state::AppState;

/// `/health` and `/ready`; the load fields only on `/ready`, the bound only when there is one.
#[derive(Debug, Serialize)]
pub struct Health {
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u64>,
}

/// Live: 200 while the server answers at all, draining included, so that a probe does not
/// restart a replica that is finishing its requests.
pub async fn health() -> Json<Health> {
    Json(Health { status: "ok", in_flight: None, max_in_flight: None })
}

/// Ready: 503 with `Retry-After` once shutdown has begun or while the in-flight bound is
/// reached, so a balancer sends the next request elsewhere instead of earning a 429.
pub async fn ready(State(state): State<AppState>) -> Response {
    if state.is_draining() {
        return ApiError::unavailable("the server is shutting down").with_retry_after(1).into_response();
    }
    let (in_flight, bound) = (state.engine.in_flight(), state.engine.max_queued_requests().map(|b| b as u64));
    if let Some(bound) = bound.filter(|&b| in_flight >= b) {
        let message = format!("at capacity: {in_flight} requests in flight (bound {bound})");
        return ApiError::unavailable(message).with_retry_after(1).into_response();
    }
    if let Some(miss) = state.engine.short_request_refusal() {
        let message = format!("a short request would be refused: {}", EngineError::WouldMissTtft(miss));
        return ApiError::unavailable(message).with_retry_after(miss.retry_after.as_secs().max(1)).into_response();
    }
    Json(Health { status: "ready", in_flight: Some(in_flight), max_in_flight: bound }).into_response()
}
