//! `POST /v1/chat/completions`: the request body (`protocol`), its checks and the engine
//! request it becomes (`handler`, with the conversation in `messages` and tool use in
//! `tools`), and the reply: `<think>` split into `reasoning_content` (`reasoning`), tool calls
//! found in the content (`tool_calls`, one file per model family's syntax), chunks and whole
//! messages (`format`) in chat's own bodies (`response`).

mod format;
mod handler;
pub mod messages;
pub mod protocol;
mod reasoning;
mod response;
mod tool_calls;
mod tools;

pub use handler::chat_completions;
pub(crate) use handler::parse_chat;
