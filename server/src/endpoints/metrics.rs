//! `GET /metrics`: Prometheus text, the engine's series followed by the server's, every
//! sample labelled with the served model's name.

use std::fmt::Write;

use axum::extract::State;

use crate::state::AppState;

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
