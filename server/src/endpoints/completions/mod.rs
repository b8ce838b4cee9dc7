//! `POST /v1/completions`: the request body (`protocol`), its checks and the engine requests
//! it becomes (`handler`), and the reply: the prompt's echo and logprobs (`echo`), chunks and
//! whole choices (`format`) in completions' own bodies (`response`).

mod echo;
mod format;
mod handler;
pub mod protocol;
mod response;

pub use handler::completions;
pub(crate) use handler::parse_completion;
