//! Server-side Prometheus counters (responses by route and status) and the middleware that
//! counts them; `/metrics` appends them to the engine's own series.

use std::collections::BTreeMap;
use std::fmt::Write;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Mutex;

use crate::state::AppState;

/// Routes get their own label; anything else is `other`, so a scanner can't blow up the
/// label set.
const ROUTES: &[&str] = &[
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/api/chat",
    "/api/generate",
    "/api/tags",
    "/api/ps",
    "/api/show",
    "/api/version",
    "/v1/models",
    "/tokenize",
    "/detokenize",
    "/health",
    "/ready",
    "/metrics",
];

#[derive(Default)]
pub struct HttpMetrics {
    responses: Mutex<BTreeMap<(&'static str, u16), u64>>,
}

impl HttpMetrics {
    pub fn record(&self, route: &'static str, status: u16) {
        *self.responses.lock().unwrap_or_else(|e| e.into_inner()).entry((route, status)).or_insert(0) += 1;
    }

    pub fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP entrobatch_http_requests_total HTTP responses by route and status.");
        let _ = writeln!(out, "# TYPE entrobatch_http_requests_total counter");
        let responses = self.responses.lock().unwrap_or_else(|e| e.into_inner());
        for ((route, status), count) in responses.iter() {
            let _ = writeln!(out, "entrobatch_http_requests_total{{route=\"{route}\",status=\"{status}\"}} {count}");
        }
    }
}

/// Middleware: counts every response by route and status (for streams, the status sent
/// with the headers).
pub async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let route = ROUTES.iter().copied().find(|r| *r == path).unwrap_or("other");
    let response = next.run(req).await;
    state.http.record(route, response.status().as_u16());
    response
}
