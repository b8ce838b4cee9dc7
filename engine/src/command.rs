//! What the `Engine` and each `RequestHandle` send to the engine loop: new requests, aborts,
//! and the order to stop. A leaf of the crate's module graph, so the senders and the loop
//! both depend on it and never on each other.

use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use crate::event::{Event, RequestId};
use crate::in_flight::InFlightPermit;
use crate::validation::PreparedRequest;

/// A validated request on its way into the loop.
pub(crate) struct PendingRequest {
    pub(crate) id: RequestId,
    pub(crate) request: PreparedRequest,
    /// Where the request's events go; its `RequestHandle` holds the other end.
    pub(crate) sender: UnboundedSender<Event>,
    /// Held until the request's `Finished` event is sent.
    pub(crate) in_flight: InFlightPermit,
    pub(crate) submitted_at: Instant,
    /// The TTFT admission expected for it, when it had a TTFT target.
    pub(crate) estimated_ttft: Option<Duration>,
}

pub(crate) enum Command {
    /// One or more requests, admitted together before the next step.
    Submit(Vec<PendingRequest>),
    Abort(RequestId),
    /// Stop taking work; `finish_in_flight` decides between draining and aborting.
    Shutdown {
        finish_in_flight: bool,
    },
}
