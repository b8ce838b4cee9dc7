//! `POST /v1/chat/completions`: the request body (`protocol`), its checks and the engine
//! request it becomes (`handler`, with the conversation in `messages` and tool use in
//! `tools`), and the reply: `<think>` split into `reasoning_content` (`reasoning`), tool calls
//! found in the content (`tool_calls`, one file per model family's syntax), chunks and whole
//! messages (`format`) in chat's own bodies (`response`). `reply` is the same reading of the
//! output without OpenAI's shapes, for the Anthropic and Ollama dialects.

mod format;
mod handler;
pub mod messages;
pub mod protocol;
mod reasoning;
mod reply;
mod response;
mod tool_calls;
mod tools;

pub(crate) use format::chat_logprobs;
pub use handler::chat_completions;
pub(crate) use handler::{parse_chat, ParsedChat};
pub(crate) use reply::{call_arguments, ReplyParser, ReplyPiece};
pub(crate) use response::ChatLogprob;
