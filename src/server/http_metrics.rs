//! Server-side Prometheus counters, appended to the engine's own series on `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Mutex;

use super::state::AppState;

/// Routes get their own label; anything else is `other`, so a scanner can't blow up the
/// label set.
const ROUTES: &[&str] = &[
    "/v1/completions",
    "/v1/chat/completions",
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

/// `GET /metrics`: the engine's series (requests by outcome, queue, KV blocks, prefix cache,
/// TTFT/ITL histograms, tokens), then the server's. Strategy series (MTI trigger rate, WeDLM
/// tokens per forward) belong in `EngineMetrics::render_prometheus`, which is rendered here
/// verbatim, so they appear on this endpoint with no server change.
pub async fn render(State(state): State<AppState>) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    let mut out = state.engine.metrics().render_prometheus();
    state.http.render(&mut out);
    let _ = writeln!(out, "# HELP entrobatch_server_draining 1 once shutdown has begun.");
    let _ = writeln!(out, "# TYPE entrobatch_server_draining gauge");
    let _ = writeln!(out, "entrobatch_server_draining {}", u8::from(state.is_draining()));
    let out = label_series(&out, "model_name", &state.model_id);
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], out)
}

/// Adds `name="value"` as the first label of every sample line (comments untouched), as
/// vLLM labels every series with `model_name`: one dashboard, several models.
fn label_series(text: &str, name: &str, value: &str) -> String {
    let escaped = value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    let label = format!("{name}=\"{escaped}\"");
    let mut out = String::with_capacity(text.len() + text.lines().count() * (label.len() + 3));
    for line in text.lines() {
        let series_end = line.find(['{', ' ']).filter(|_| !line.starts_with('#'));
        match series_end.map(|i| (i, line.as_bytes()[i])) {
            Some((i, b'{')) if line[i + 1..].starts_with('}') => {
                let _ = writeln!(out, "{}{{{label}{}", &line[..i], &line[i + 1..]);
            }
            Some((i, b'{')) => {
                let _ = writeln!(out, "{}{{{label},{}", &line[..i], &line[i + 1..]);
            }
            Some((i, _)) => {
                let _ = writeln!(out, "{}{{{label}}}{}", &line[..i], &line[i..]);
            }
            None => {
                let _ = writeln!(out, "{line}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::label_series;

    #[test]
    fn every_sample_gets_the_label_and_comments_stay() {
        let text = "# HELP a_total x\n# TYPE a_total counter\na_total 3\nb_bucket{le=\"0.5\"} 1\nc{} 2\n";
        let labelled = label_series(text, "model_name", "m\"1");
        assert_eq!(
            labelled,
            "# HELP a_total x\n# TYPE a_total counter\na_total{model_name=\"m\\\"1\"} 3\n\
             b_bucket{model_name=\"m\\\"1\",le=\"0.5\"} 1\nc{model_name=\"m\\\"1\"} 2\n"
        );
    }
}
