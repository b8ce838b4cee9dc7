//! `x-request-id`: taken from the client (or a balancer in front) when it sends one, made up
//! otherwise, echoed on the response and carried by this request's log lines, so one request
//! can be followed from the balancer's log to this replica's.

use std::time::Instant;

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Longer ids are replaced rather than logged: the header is client-controlled.
const MAX_LEN: usize = 128;

pub async fn propagate(req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= MAX_LEN)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{:016x}", crate::state::random_u64()));
    let span = tracing::info_span!("http", request_id = %id, method = %req.method(), path = %req.uri().path());
    let started = Instant::now();
    let mut response = next.run(req).instrument(span.clone()).await;
    span.in_scope(|| {
        tracing::info!(status = response.status().as_u16(), ms = started.elapsed().as_millis() as u64, "answered")
    });
    // `to_str` accepted it, so it is visible ASCII and a valid header value.
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(X_REQUEST_ID.clone(), value);
    }
    response
}
