//! Per-token extension fields shared by both endpoints: logprobs in OpenAI's two layouts,
//! `token_metrics` (entropy, varentropy, strategy decisions) and `token_ids`.

use crate::{Engine, GeneratedToken};

use super::response::{ChatLogprob, ChatLogprobs, CompletionLogprobs, Envelope, TokenExtras, TopChatLogprob, Usage};
use super::state::AppState;

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
        Self { state: state.clone(), id: state.response_id(kind, request), created: super::state::unix_now() }
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

/// Completions layout: parallel arrays, top logprobs as `{token_text: logprob}` maps.
/// `text_offset` carries on across stream chunks.
pub fn completion_logprobs(engine: &Engine, tokens: &[GeneratedToken], text_offset: &mut usize) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for t in tokens {
        let text = token_text(engine, t.token_id);
        out.text_offset.push(*text_offset);
        *text_offset += text.len();
        out.token_logprobs.push(t.logprob.as_ref().map(|lp| f64::from(lp.logprob)));
        out.top_logprobs.push(
            t.logprob
                .as_ref()
                .map(|lp| lp.top_logprobs.iter().map(|&(id, p)| (token_text(engine, id), f64::from(p))).collect()),
        );
        out.tokens.push(text);
    }
    out
}

/// Chat layout: `{"content": [{token, logprob, bytes, top_logprobs: [...]}]}`; tokens
/// without logprobs are left out.
pub fn chat_logprobs(engine: &Engine, tokens: &[GeneratedToken]) -> ChatLogprobs {
    let top = |id: u32, logprob: f32| {
        let token = token_text(engine, id);
        TopChatLogprob { bytes: token.as_bytes().to_vec(), token, logprob: f64::from(logprob) }
    };
    let content = tokens
        .iter()
        .filter_map(|t| {
            let lp = t.logprob.as_ref()?;
            let TopChatLogprob { token, logprob, bytes } = top(t.token_id, lp.logprob);
            let top_logprobs = lp.top_logprobs.iter().map(|&(id, p)| top(id, p)).collect();
            Some(ChatLogprob { token, logprob, bytes, top_logprobs })
        })
        .collect();
    ChatLogprobs { content }
}
