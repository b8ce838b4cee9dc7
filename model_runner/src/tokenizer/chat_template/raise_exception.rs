//! `raise_exception`, the global HuggingFace's `apply_chat_template` adds to its Jinja
//! environment (transformers `utils/chat_template_utils.py`) for templates to reject a
//! conversation, and how the renderer tells such a refusal from a template that failed to run.

use minijinja::value::Value;
use minijinja::{Error, ErrorKind};

/// `raise_exception(msg)`: templates call it to reject conversations they cannot format. The
/// message rides along as the error's source, so the renderer can tell a refusal from a
/// template that failed to run ([`raised_message`]).
pub(super) fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg.clone()).with_source(Raised(msg)))
}

/// The message of a `raise_exception` call somewhere in `error`'s chain.
pub(super) fn raised_message(error: &Error) -> Option<String> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if let Some(Raised(msg)) = e.downcast_ref::<Raised>() {
            return Some(msg.clone());
        }
        cause = e.source();
    }
    None
}

#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}
