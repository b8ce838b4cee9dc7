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

/// One conversation turn as chat templates see it (`messages[i]` in the template).
///
/// The optional fields follow HF transformers' message dicts and are left out of the template's
/// view when absent, so templates testing `message.tool_calls is defined` (or truthiness)
/// behave as they do in Python.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    /// An assistant turn's calls, OpenAI-shaped: `{"id", "type": "function", "function":
    /// {"name", "arguments"}}`. `arguments` may be the OpenAI JSON *string*: rendering turns
    /// it into the object templates expect (see [`ChatTemplate::apply_with_tools`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// A `tool` turn: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A `tool` turn: the function's name (some templates print it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self { role: role.into(), content: content.into(), ..Self::default() }
    }

    /// The same message carrying `calls` (an assistant turn that called tools).
    pub fn with_tool_calls(mut self, calls: Vec<serde_json::Value>) -> Self {
        self.tool_calls = Some(calls);
        self
    }

    /// A `tool` turn answering call `tool_call_id`.
    pub fn tool_result(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: "tool".into(),
            content: content.into(),
            tool_call_id: Some(tool_call_id.into()),
            name: None,
            tool_calls: None,
        }
    }
}

/// OpenAI clients send `function.arguments` as a JSON string, but HF templates print it with
/// `tool_call.arguments | tojson`, which would quote the string a second time (`"{\"city\"..."`)
/// instead of writing the object the model was trained on. Like vLLM, a string that parses
/// as a JSON object is replaced by the object; anything else is left as given.
fn arguments_as_object(call: &mut serde_json::Value) {
    use serde_json::Value as J;
    let slot = match call.get_mut("function") {
        Some(f @ J::Object(_)) => f.get_mut("arguments"),
        _ => call.get_mut("arguments"),
    };
    if let Some(args) = slot {
        if let J::String(text) = &*args {
            if let Ok(obj @ J::Object(_)) = serde_json::from_str::<J>(text) {
                *args = obj;
            }
        }
    }
}

/// `messages` with every tool call's arguments as an object, copying only when some message
/// has calls (the common, tool-free prompt is not cloned).
fn normalized(messages: &[ChatMessage]) -> std::borrow::Cow<'_, [ChatMessage]> {
    if messages.iter().all(|m| m.tool_calls.is_none()) {
        return std::borrow::Cow::Borrowed(messages);
    }
    let mut owned = messages.to_vec();
    for call in owned.iter_mut().filter_map(|m| m.tool_calls.as_mut()).flatten() {
        arguments_as_object(call);
    }
    std::borrow::Cow::Owned(owned)
}

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
        env.add_function("raise_exception", fns::raise_exception);
        env.add_function("strftime_now", strftime::strftime_now);
        env.add_filter("tojson", fns::tojson);
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
        let messages = normalized(messages);
        // Same variables HF passes: absent tools/documents are None (not undefined), so
        // templates testing `tools is not none` behave as in Python.
        let tools = match tools {
            Some(t) => Value::from_serialize(t),
            None => Value::from(()),
        };
        let mut ctx: Vec<(&str, Value)> = vec![
            ("messages", Value::from_serialize(&*messages)),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
            ("tools", tools),
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn string_arguments_become_objects() {
        let mut call = json!({"id": "c", "type": "function",
            "function": {"name": "f", "arguments": "{\"a\": [1, 2]}"}});
        arguments_as_object(&mut call);
        assert_eq!(call["function"]["arguments"], json!({"a": [1, 2]}));
        // Flat `{name, arguments}` calls (templates accept both shapes) are handled too.
        let mut flat = json!({"name": "f", "arguments": "{}"});
        arguments_as_object(&mut flat);
        assert_eq!(flat["arguments"], json!({}));
    }

    #[test]
    fn non_object_arguments_are_left_alone() {
        for args in [json!("not json"), json!("[1]"), json!("3"), json!(null), json!(7)] {
            let mut call = json!({"function": {"name": "f", "arguments": args.clone()}});
            arguments_as_object(&mut call);
            assert_eq!(call["function"]["arguments"], args);
        }
        // A message shape the normalizer does not know is not touched (nor does it panic).
        let mut odd = json!(["x"]);
        arguments_as_object(&mut odd);
        assert_eq!(odd, json!(["x"]));
    }

    #[test]
    fn tool_free_conversations_are_not_copied() {
        let m = vec![ChatMessage::new("user", "hi")];
        assert!(matches!(normalized(&m), std::borrow::Cow::Borrowed(_)));
        let with = vec![ChatMessage::new("assistant", "").with_tool_calls(vec![json!({})])];
        assert!(matches!(normalized(&with), std::borrow::Cow::Owned(_)));
    }

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
