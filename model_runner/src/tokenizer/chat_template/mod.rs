//! Renders a model's Jinja chat template (`tokenizer.chat_template` in the GGUF) the way
//! HuggingFace `apply_chat_template` does, so prompts match what the model was trained on.
//!
//! A model without a template gets its family's turn format when its vocabulary has that
//! family's turn tokens (Gemma's `<start_of_turn>`, ChatML's `<|im_start|>`), said at load;
//! otherwise chat requests are refused (a base model's vocabulary with no turn tokens has no
//! chat format to guess), and completions still work.

use minijinja::value::Value;
use minijinja::Environment;

use super::{Tokenizer, TokenizerError};

mod message;
// The functions and filters HuggingFace's `apply_chat_template` adds to its Jinja environment,
// so templates render as they do in Python: `raise_exception`, `strftime_now`, `tojson`.
mod raise_exception;
mod strftime;
mod tojson;

/// Fallback template: `<|im_start|>{role}\n{content}<|im_end|>\n` per message, then
/// `<|im_start|>assistant\n` when a generation prompt is requested.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// Gemma's turn format (its instruction-tuned models' template, text only): a system message
/// is folded into the first user turn, and the assistant's role is `model`.
pub const GEMMA_TEMPLATE: &str = "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first_user_prefix = messages[0]['content'] + '\n\n' %}{% set loop_messages = messages[1:] %}{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}";

/// For a vocabulary with no turn tokens: every chat request is refused with what to do instead.
const NO_CHAT_FORMAT_TEMPLATE: &str = "{{ raise_exception('this model has no chat template and its vocabulary has no turn tokens (a base model): send a plain completion request (/v1/completions) instead') }}";

const TEMPLATE_NAME: &str = "chat";

use message::normalized;
pub use message::ChatMessage;

/// A compiled chat template. Rendering is `&self` and thread-safe.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: Option<String>,
    eos_token: Option<String>,
    /// Whether the template source reads `tools` (found once, at compile time).
    supports_tools: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("supports_tools", &self.supports_tools)
            .finish()
    }
}

impl ChatTemplate {
    /// Compiles `template`. `bos_token`/`eos_token` are the token *texts* templates may print.
    pub fn new(template: &str, bos_token: Option<String>, eos_token: Option<String>) -> Result<Self, TokenizerError> {
        let mut env = Environment::new();
        // HF compiles templates with trim_blocks and lstrip_blocks on; without them the
        // whitespace around `{% %}` tags ends up in the prompt.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception::raise_exception);
        env.add_function("strftime_now", strftime::strftime_now);
        env.add_filter("tojson", tojson::tojson);
        env.add_template_owned(TEMPLATE_NAME, template.to_string())
            .map_err(|e| TokenizerError::Build(format!("chat template: {e:#}")))?;
        // Static analysis of the source: a template that never names `tools` cannot render a
        // tool list, whatever the context holds.
        let supports_tools =
            env.get_template(TEMPLATE_NAME).map(|t| t.undeclared_variables(false).contains("tools")).unwrap_or(false);
        Ok(Self { env, bos_token, eos_token, supports_tools })
    }

    /// The ChatML fallback, for models whose GGUF carries no template.
    pub fn chatml(bos_token: Option<String>, eos_token: Option<String>) -> Self {
        // CHATML_TEMPLATE is a fixed, tested string: compiling it cannot fail.
        Self::new(CHATML_TEMPLATE, bos_token, eos_token).expect("built-in ChatML template compiles")
    }

    /// The tokenizer's own template, or its family's turn format when it has none (see the
    /// module docs), with its BOS/EOS texts.
    pub fn for_tokenizer(tok: &Tokenizer) -> Result<Self, TokenizerError> {
        let text = |id: Option<u32>| id.and_then(|i| tok.id_to_token(i));
        let bos = text(tok.bos_token_id);
        let eos = text(tok.eos_token_ids.first().copied());
        match &tok.chat_template {
            Some(t) => Self::new(t, bos, eos),
            None if tok.token_id("<start_of_turn>").is_some() && tok.token_id("<end_of_turn>").is_some() => {
                tracing::warn!("the model has no chat template: chat requests use Gemma's turn format");
                Self::new(GEMMA_TEMPLATE, bos, eos)
            }
            None if tok.token_id("<|im_start|>").is_some() && tok.token_id("<|im_end|>").is_some() => {
                tracing::warn!("the model has no chat template: chat requests use ChatML");
                Ok(Self::chatml(bos, eos))
            }
            None => {
                tracing::warn!("the model has no chat template and no turn tokens: chat requests will be refused");
                Self::new(NO_CHAT_FORMAT_TEMPLATE, bos, eos)
            }
        }
    }

    /// Whether the template reads the `tools` variable, i.e. can show the model the tools it may
    /// call (Qwen2.5's does; ChatML and SmolLM2's do not). Callers should refuse `tools` for a
    /// template that cannot render them rather than silently dropping them.
    pub fn supports_tools(&self) -> bool {
        self.supports_tools
    }

    /// Renders the conversation. `enable_thinking` is passed as a template variable (Qwen3
    /// templates read it); `None` leaves it undefined so the template's own default applies.
    pub fn apply(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: Option<bool>,
    ) -> Result<String, TokenizerError> {
        self.apply_with_tools(messages, add_generation_prompt, enable_thinking, None)
    }

    /// [`apply`](Self::apply) with the OpenAI `tools` list (`[{"type": "function", "function":
    /// {...}}]`), passed to the template as-is, as HF transformers does. `None` gives the
    /// template `tools = none`. Tool calls in `messages` are rendered with their `arguments`
    /// as a JSON object even when given as the OpenAI JSON string.
    pub fn apply_with_tools(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: Option<bool>,
        tools: Option<&[serde_json::Value]>,
    ) -> Result<String, TokenizerError> {
        let inputs = TemplateInputs { add_generation_prompt, enable_thinking, tools, ..TemplateInputs::default() };
        self.render(messages, &inputs).map_err(TokenizerError::from)
    }

    /// Renders the conversation with everything the template may read beside it, telling a
    /// conversation the template refuses (`raise_exception`) from any other failure.
    pub fn render(&self, messages: &[ChatMessage], inputs: &TemplateInputs<'_>) -> Result<String, RenderError> {
        let messages = normalized(messages);
        // Same variables HF passes: absent tools/documents are None (not undefined), so
        // templates testing `tools is not none` behave as in Python.
        let tools = match inputs.tools {
            Some(t) => Value::from_serialize(t),
            None => Value::from(()),
        };
        // The caller's extra variables go first so that the ones set here, which the rest of
        // the request depends on, win over a kwarg of the same name.
        let mut ctx: Vec<(&str, Value)> =
            inputs.kwargs.iter().flat_map(|k| k.iter()).map(|(k, v)| (k.as_str(), Value::from_serialize(v))).collect();
        ctx.extend([
            ("messages", Value::from_serialize(&*messages)),
            ("add_generation_prompt", Value::from(inputs.add_generation_prompt)),
            ("tools", tools),
            ("documents", Value::from(())),
        ]);
        if let Some(b) = &self.bos_token {
            ctx.push(("bos_token", Value::from(b.as_str())));
        }
        if let Some(e) = &self.eos_token {
            ctx.push(("eos_token", Value::from(e.as_str())));
        }
        if let Some(t) = inputs.enable_thinking {
            ctx.push(("enable_thinking", Value::from(t)));
        }
        let ctx: Value = ctx.into_iter().collect();
        self.env.get_template(TEMPLATE_NAME).and_then(|t| t.render(ctx)).map_err(|e| {
            match raise_exception::raised_message(&e) {
                Some(message) => RenderError::Raised { message },
                None => RenderError::Failed(format!("{e:#}")),
            }
        })
    }
}

/// What a render passes to the template beside the messages.
#[derive(Clone, Copy, Debug, Default)]
pub struct TemplateInputs<'a> {
    pub add_generation_prompt: bool,
    /// Qwen3's thinking switch; `None` leaves it undefined (the template's own default).
    pub enable_thinking: Option<bool>,
    pub tools: Option<&'a [serde_json::Value]>,
    /// Further template variables (vLLM's `chat_template_kwargs`); a name the renderer sets
    /// itself (`messages`, `tools`, ...) keeps the renderer's value.
    pub kwargs: Option<&'a serde_json::Map<String, serde_json::Value>>,
}

/// The variables [`ChatTemplate::render`] sets itself.
pub const RESERVED_VARIABLES: [&str; 7] =
    ["messages", "add_generation_prompt", "tools", "documents", "bos_token", "eos_token", "enable_thinking"];

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The template called `raise_exception(message)`: it cannot format this conversation
    /// (two user turns in a row where it wants alternation, a system message out of place).
    #[error("the chat template refused the conversation: {message}")]
    Raised { message: String },
    /// Anything else: a template the renderer cannot run, or a value it cannot format.
    #[error("{0}")]
    Failed(String),
}

impl From<RenderError> for TokenizerError {
    fn from(e: RenderError) -> Self {
        match e {
            RenderError::Raised { message } => TokenizerError::Encode(format!("chat template: {message}")),
            RenderError::Failed(detail) => TokenizerError::Encode(format!("chat template: {detail}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tools_context_is_none_or_the_list() {
        let tpl = ChatTemplate::new(
            "{% if tools is none %}none{% else %}{{ tools | length }}:{{ tools[0].function.name }}{% endif %}",
            None,
            None,
        )
        .unwrap();
        let m = [ChatMessage::new("user", "x")];
        assert_eq!(tpl.apply(&m, false, None).unwrap(), "none");
        let tools = [json!({"type": "function", "function": {"name": "f"}})];
        assert_eq!(tpl.apply_with_tools(&m, false, None, Some(&tools)).unwrap(), "1:f");
    }
}
