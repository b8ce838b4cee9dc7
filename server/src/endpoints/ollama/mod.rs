//! Ollama's API (`/api/chat`, `/api/generate`, `/api/tags`, `/api/ps`, `/api/show`,
//! `/api/version`) for Open WebUI, Continue, LangChain's and LlamaIndex's Ollama
//! integrations and the editors that speak only it. A body (`protocol`) is converted into the
//! chat endpoint's request (`convert`) and goes through the same checks and engine request
//! as `/v1/chat/completions`; the reply (`reply`) is read by the same reasoning and tool-call
//! parsers and written as Ollama's bodies (`response`): NDJSON lines unless `stream: false`,
//! errors as `{"error": ...}` (`error`).

mod convert;
mod error;
mod handler;
mod protocol;
mod reply;
mod response;

pub(crate) use handler::parse_ollama_chat;
pub use handler::{chat, generate, ps, show, tags, version};
pub(crate) use protocol::ChatBody;
