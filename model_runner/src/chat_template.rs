//! Renders a model's Jinja chat template (`tokenizer.chat_template` in the GGUF) the way
//! HuggingFace `apply_chat_template` does, so prompts match what the model was trained on.
//!
//! Models without a template fall back to ChatML ([`CHATML_TEMPLATE`]): it is what SmolLM and
//! Qwen use, and a plain, well-delimited format is the least bad guess for an unknown model.

use minijinja::value::Value;
use minijinja::Environment;

use crate::tokenizer::{GgufTokenizer, TokenizerError};

#[path = "tokenizer_template_fns.rs"]
mod fns;
#[path = "tokenizer_strftime.rs"]
mod strftime;

/// Fallback template: `<|im_start|>{role}\n{content}<|im_end|>\n` per message, then
/// `<|im_start|>assistant\n` when a generation prompt is requested.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

const TEMPLATE_NAME: &str = "chat";

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template. Rendering is `&self` and thread-safe.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish()
    }
}

impl ChatTemplate {
    /// Compiles `template`. `bos_token`/`eos_token` are the token *texts* templates may print.
    pub fn new(
        template: &str,
        bos_token: Option<String>,
        eos_token: Option<String>,
    ) -> Result<Self, TokenizerError> {
        let mut env = Environment::new();
        // HF compiles templates with trim_blocks and lstrip_blocks on; without them the
        // whitespace around `{% %}` tags ends up in the prompt.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", fns::raise_exception);
        env.add_function("strftime_now", strftime::strftime_now);
        env.add_filter("tojson", fns::tojson);
        env.add_template_owned(TEMPLATE_NAME, template.to_string())
            .map_err(|e| TokenizerError::Build(format!("chat template: {e:#}")))?;
        Ok(Self {
            env,
            bos_token,
            eos_token,
        })
    }

    /// The ChatML fallback, for models whose GGUF carries no template.
    pub fn chatml(bos_token: Option<String>, eos_token: Option<String>) -> Self {
        // CHATML_TEMPLATE is a fixed, tested string: compiling it cannot fail.
        Self::new(CHATML_TEMPLATE, bos_token, eos_token).expect("built-in ChatML template compiles")
    }

    /// The tokenizer's own template, or ChatML when it has none, with its BOS/EOS texts.
    pub fn for_tokenizer(tok: &GgufTokenizer) -> Result<Self, TokenizerError> {
        let text = |id: Option<u32>| id.and_then(|i| tok.id_to_token(i));
        let bos = text(tok.bos_token_id);
        let eos = text(tok.eos_token_ids.first().copied());
        match &tok.chat_template {
            Some(t) => Self::new(t, bos, eos),
            None => {
                tracing::warn!("GGUF has no tokenizer.chat_template; falling back to ChatML");
                Ok(Self::chatml(bos, eos))
            }
        }
    }

    /// Renders the conversation. `enable_thinking` is passed as a template variable (Qwen3
    /// templates read it); `None` leaves it undefined so the template's own default applies.
    pub fn apply(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: Option<bool>,
    ) -> Result<String, TokenizerError> {
        // Same variables HF passes: tools/documents are None (not undefined), so templates
        // testing `tools is not none` behave as in Python.
        let mut ctx: Vec<(&str, Value)> = vec![
            ("messages", Value::from_serialize(messages)),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
            ("tools", Value::from(())),
            ("documents", Value::from(())),
        ];
        if let Some(b) = &self.bos_token {
            ctx.push(("bos_token", Value::from(b.as_str())));
        }
        if let Some(e) = &self.eos_token {
            ctx.push(("eos_token", Value::from(e.as_str())));
        }
        if let Some(t) = enable_thinking {
            ctx.push(("enable_thinking", Value::from(t)));
        }
        let ctx: Value = ctx.into_iter().collect();
        self.env
            .get_template(TEMPLATE_NAME)
            .and_then(|t| t.render(ctx))
            .map_err(|e| TokenizerError::Encode(format!("chat template: {e:#}")))
    }
}
