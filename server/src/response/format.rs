//! What both generating endpoints put around and beside the text: the frame every body of a
//! response repeats (id, creation time, model, fingerprint), a token's text as clients see
//! it, and the per-token extension fields (`token_metrics`: entropy, varentropy, strategy
//! decisions; `token_ids`). Each endpoint's logprobs layout is in its own `format.rs`.

use entrobatch::{Engine, GeneratedToken};

use super::{Envelope, TokenExtras, Usage};
use crate::state::AppState;

/// What every body of one response repeats: its id and creation time, and the server's
/// model id and fingerprint.
pub struct Frame {
    pub state: AppState,
    pub id: String,
    pub created: u64,
}

impl Frame {
    /// A response id for engine request `request` (`kind` is `chatcmpl` or `cmpl`).
    pub fn new(state: &AppState, kind: &str, request: u64) -> Self {
        Self { state: state.clone(), id: state.response_id(kind, request), created: crate::state::unix_now() }
    }

    pub fn body<C>(&self, object: &'static str, choices: Vec<C>, usage: Option<Usage>) -> Envelope<C> {
        Envelope {
            id: self.id.clone(),
            object,
            created: self.created,
            model: self.state.model_id.clone(),
            system_fingerprint: self.state.fingerprint.clone(),
            choices,
            usage,
        }
    }
}

/// A token's text as clients see it (decoded alone, special tokens kept).
pub fn token_text(engine: &Engine, id: u32) -> String {
    engine.tokenizer().decode(&[id], false).unwrap_or_default()
}

/// What a response carries beside the text.
#[derive(Clone, Copy, Default)]
pub struct Extras {
    pub return_metrics: bool,
    pub return_token_ids: bool,
}

impl Extras {
    /// `token_metrics` and `token_ids` for these tokens, as far as they were asked for.
    pub fn for_tokens(&self, tokens: &[GeneratedToken]) -> TokenExtras {
        TokenExtras::new(tokens, self.return_metrics, self.return_token_ids)
    }
}
