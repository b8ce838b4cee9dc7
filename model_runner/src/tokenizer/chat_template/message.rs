//! A conversation turn as chat templates see it, and the normalization rendering applies
//! to it (OpenAI's JSON-string tool-call arguments made into the objects templates print).

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
    /// it into the object templates expect (see [`super::ChatTemplate::apply_with_tools`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// A `tool` turn: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A `tool` turn: the function's name (some templates print it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Any other key the client's message had (`reasoning_content`, a template's own field):
    /// passed to the template as given, as vLLM does, so a template that reads it can.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
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
            ..Self::default()
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
pub(super) fn normalized(messages: &[ChatMessage]) -> std::borrow::Cow<'_, [ChatMessage]> {
    if messages.iter().all(|m| m.tool_calls.is_none()) {
        return std::borrow::Cow::Borrowed(messages);
    }
    let mut owned = messages.to_vec();
    for call in owned.iter_mut().filter_map(|m| m.tool_calls.as_mut()).flatten() {
        arguments_as_object(call);
    }
    std::borrow::Cow::Owned(owned)
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
}
