//! Anthropic's Messages API: `POST /v1/messages` (whole, or its event stream) and
//! `POST /v1/messages/count_tokens`, for agent tools written against Anthropic's SDK. A body
//! (`protocol`) is converted into the chat endpoint's request (`convert`) and goes through
//! the same checks and engine request as `/v1/chat/completions`; the reply is read by the
//! same reasoning and tool-call parsers and written as content blocks (`handler`, `stream`,
//! `response`), with errors in Anthropic's shape (`error`).

mod convert;
mod error;
mod handler;
mod protocol;
mod response;
mod stream;

pub(crate) use handler::parse_messages;
pub use handler::{count_tokens, messages};
pub(crate) use protocol::MessagesRequest;
