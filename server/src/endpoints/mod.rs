//! One module per endpoint group, each owning its routes' handlers, request and response
//! bodies, and whatever only it needs; what several share is in `request/` and `response/`.
//! Adding an endpoint is a module here and a `route` line in `lib.rs` (and its path in
//! `middleware/http_metrics.rs`' `ROUTES`, for a metrics label of its own).

pub mod anthropic;
pub mod chat;
pub mod completions;
pub mod metrics;
pub mod models;
pub mod ollama;
pub mod playground;
pub mod probes;
pub mod slots;
pub mod tokenize;
