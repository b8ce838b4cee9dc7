//! The OpenAI-compatible HTTP server (`entrobatch serve`): axum over the same `Engine`
//! embedders use. Bad input is rejected on the request's own task with an OpenAI-style
//! error and never reaches the engine loop; streams own their request handles, so a client
//! that hangs up aborts its request.
//!
//! Routes: `POST /v1/completions`, `POST /v1/chat/completions`, `GET /v1/models`,
//! `GET /v1/models/{id}`, Anthropic's `POST /v1/messages` and `/v1/messages/count_tokens`,
//! Ollama's `/api/chat`, `/api/generate`, `/api/tags`, `/api/ps`, `/api/show`,
//! `/api/version`, `POST /tokenize`, `POST /detokenize` (vLLM's shapes),
//! `GET /health`, `GET /metrics` (Prometheus text), and the playground page: `GET /`,
//! `GET /playground/info`.
//!
//! Layout: `endpoints/` holds one module per endpoint group (its handlers, bodies and
//! endpoint-only logic); `request/` what they share to turn a body into an engine request;
//! `response/` what they share to build and send a reply; `middleware/` the layers around
//! every route; `state.rs` the state every handler gets; `validate.rs` the whole input check
//! as one synchronous call. This file wires routes to handlers and runs the server.

mod endpoints;
mod middleware;
mod request;
mod response;
mod state;
mod validate;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use entrobatch::{Engine, ShutdownMode};
use tokio::net::TcpListener;

use endpoints::{anthropic, chat, completions, metrics, models, ollama, playground, probes, slots, tokenize};
use middleware::{http_metrics, request_id};

pub use request::defaults::{GenerationConfig, GenerationDefaults};
pub use response::error::ApiError;
pub use state::AppState;
pub use validate::{validate_body, Endpoint, ValidatedRequest};

#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The id clients use in `model`; defaults to the model file's stem.
    pub served_model_name: Option<String>,
    /// Larger bodies get 413.
    pub body_limit_bytes: usize,
    /// After a shutdown signal, how long in-flight requests may run before they are aborted.
    pub shutdown_grace: Duration,
    /// Sampling values for fields a request leaves out: `GenerationDefaults::resolve` of
    /// `--generation-config` and `--override-generation-config`.
    pub generation_defaults: GenerationDefaults,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            served_model_name: None,
            body_limit_bytes: 1 << 20,
            shutdown_grace: Duration::from_secs(30),
            generation_defaults: GenerationDefaults::default(),
        }
    }
}

pub fn router(state: AppState, config: &ServerConfig) -> Router {
    Router::new()
        .route("/v1/completions", post(completions::completions))
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/models", get(models::models))
        .route("/v1/models/{id}", get(models::model))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/tags", get(ollama::tags))
        .route("/api/ps", get(ollama::ps))
        .route("/api/show", post(ollama::show))
        .route("/api/version", get(ollama::version))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/slots", get(slots::slots))
        .route("/slots/{id}", post(slots::slots))
        .route("/health", get(probes::health))
        .route("/ready", get(probes::ready))
        .route("/metrics", get(metrics::render))
        .route("/", get(playground::page))
        .route("/playground/info", get(playground::info))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(config.body_limit_bytes))
        .layer(axum::middleware::from_fn_with_state(state.clone(), http_metrics::track))
        .layer(axum::middleware::from_fn(request_id::propagate))
        .with_state(state)
}

/// Serves until `shutdown` resolves, then drains: `/ready` and new requests answer 503 with
/// `Retry-After` (the listener stays open, so probes and balancers see the refusal rather than
/// a dead port) while in-flight requests finish; after `shutdown_grace` the rest are aborted.
/// Then the listener closes and the engine stops.
pub async fn serve(
    listener: TcpListener,
    engine: Arc<Engine>,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let state =
        AppState::with_defaults(engine.clone(), config.served_model_name.clone(), config.generation_defaults.clone());
    let app = router(state.clone(), &config);
    let grace = config.shutdown_grace;
    let drain_engine = engine.clone();
    let drained = async move {
        shutdown.await;
        tracing::info!(
            in_flight = drain_engine.in_flight(),
            "draining: refusing new requests, finishing in-flight ones"
        );
        state.set_draining();
        let deadline = tokio::time::Instant::now() + grace;
        while drain_engine.in_flight() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if drain_engine.in_flight() > 0 {
            tracing::warn!(
                in_flight = drain_engine.in_flight(),
                "shutdown grace period over: aborting in-flight requests"
            );
            let _ = tokio::task::spawn_blocking(move || drain_engine.shutdown(ShutdownMode::Abort)).await;
        }
    };
    let served = axum::serve(listener, app).with_graceful_shutdown(drained).await;
    let _ = tokio::task::spawn_blocking(move || engine.shutdown(ShutdownMode::Finish)).await;
    served
}

/// `serve` driven by SIGINT/SIGTERM: the first one drains, a second aborts at once.
pub async fn serve_until_signal(
    listener: TcpListener,
    engine: Arc<Engine>,
    config: ServerConfig,
) -> std::io::Result<()> {
    let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
    let abort_engine = engine.clone();
    let signals = tokio::spawn(async move {
        wait_for_signal().await;
        let _ = first_tx.send(());
        wait_for_signal().await;
        tracing::warn!("second signal: aborting in-flight requests");
        let _ = tokio::task::spawn_blocking(move || abort_engine.shutdown(ShutdownMode::Abort)).await;
    });
    let result = serve(listener, engine, config, async move {
        let _ = first_rx.await;
    })
    .await;
    signals.abort();
    result
}

/// Resolves on SIGINT or SIGTERM.
pub async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!("cannot listen for SIGTERM ({e}); only Ctrl-C stops the server");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}
