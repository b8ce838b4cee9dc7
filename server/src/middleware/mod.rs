//! Layers every route passes through, outermost first: `x-request-id` propagation and the
//! request's log span (`request_id`), then the HTTP counters behind `/metrics`
//! (`http_metrics`).

pub mod http_metrics;
pub mod request_id;
