//! ChatTemplate: real GGUF templates, a Qwen3-style thinking switch, and the HF helpers.

mod common;

use common::{load_tokenizer, QWEN25_CODER, SMOLLM2};
use entrobatch_model_runner::chat_template::{ChatMessage, ChatTemplate, CHATML_TEMPLATE};
use entrobatch_model_runner::tokenizer::TokenizerError;

fn msgs(pairs: &[(&str, &str)]) -> Vec<ChatMessage> {
    pairs.iter().map(|(r, c)| ChatMessage::new(*r, *c)).collect()
}

fn render(template: &str, messages: &[ChatMessage]) -> String {
    ChatTemplate::new(template, None, None).unwrap().apply(messages, true, None).unwrap()
}

#[test]
fn smollm2_template_with_system() {
    let Some(tok) = load_tokenizer(SMOLLM2) else {
        return;
    };
    let tpl = ChatTemplate::for_tokenizer(&tok).unwrap();
    let m = msgs(&[("system", "You are terse."), ("user", "What is 2+2?")]);
    let expected = "<|im_start|>system\nYou are terse.<|im_end|>\n\
                    <|im_start|>user\nWhat is 2+2?<|im_end|>\n\
                    <|im_start|>assistant\n";
    assert_eq!(tpl.apply(&m, true, None).unwrap(), expected);
    // Without the generation prompt the text ends after the last turn.
    let no_gen = tpl.apply(&m, false, None).unwrap();
    assert_eq!(no_gen, expected.trim_end_matches("<|im_start|>assistant\n"));
}

#[test]
fn smollm2_template_inserts_default_system_prompt() {
    let Some(tok) = load_tokenizer(SMOLLM2) else {
        return;
    };
    let tpl = ChatTemplate::for_tokenizer(&tok).unwrap();
    let got = tpl.apply(&msgs(&[("user", "Hi")]), true, None).unwrap();
    let expected =
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
                    <|im_start|>user\nHi<|im_end|>\n\
                    <|im_start|>assistant\n";
    assert_eq!(got, expected);
    // The rendered prompt tokenizes with the ChatML markers as single control tokens.
    let ids = tok.encode(&got, false).unwrap();
    assert_eq!(ids.iter().filter(|&&i| i == 1).count(), 3);
    assert_eq!(ids.iter().filter(|&&i| i == 2).count(), 2);
}

/// Expected strings rendered by Python jinja2 3.x from this GGUF's template with HF's settings
/// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols; tools=None).
#[test]
fn qwen25_coder_template_when_present() {
    let Some(tok) = load_tokenizer(QWEN25_CODER) else {
        return;
    };
    let tpl = ChatTemplate::for_tokenizer(&tok).unwrap();
    const DEFAULT_SYS: &str =
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n";
    // Qwen2.5's template supplies its own default system prompt.
    assert_eq!(
        tpl.apply(&msgs(&[("user", "Hi")]), true, None).unwrap(),
        format!("{DEFAULT_SYS}<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    );
    let multi = msgs(&[("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello!"), ("user", "Bye")]);
    assert_eq!(
        tpl.apply(&multi, true, None).unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"
    );
    // Consecutive tool results are merged into one user turn (loop.index0 / loop.last logic).
    let tools = msgs(&[("user", "Q"), ("assistant", "calling"), ("tool", "R1"), ("tool", "R2")]);
    assert_eq!(
        tpl.apply(&tools, true, None).unwrap(),
        format!(
            "{DEFAULT_SYS}<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\ncalling<|im_end|>\n\
             <|im_start|>user\n<tool_response>\nR1\n</tool_response>\n<tool_response>\nR2\n</tool_response><|im_end|>\n\
             <|im_start|>assistant\n"
        )
    );
}

/// Shaped like Qwen3's template: `enable_thinking=false` pre-fills an empty think block.
const QWEN3_STYLE: &str = r#"{%- for message in messages %}
    {{- '<|im_start|>' + message.role + '\n' + message.content.strip() + '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"#;

#[test]
fn enable_thinking_is_honoured() {
    let tpl = ChatTemplate::new(QWEN3_STYLE, None, Some("<|im_end|>".into())).unwrap();
    let m = msgs(&[("user", "  Why?  ")]);
    let base = "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n";
    assert_eq!(tpl.apply(&m, true, None).unwrap(), base);
    assert_eq!(tpl.apply(&m, true, Some(true)).unwrap(), base);
    assert_eq!(tpl.apply(&m, true, Some(false)).unwrap(), format!("{base}<think>\n\n</think>\n\n"));
}

#[test]
fn chatml_fallback() {
    let m = msgs(&[("system", "S"), ("user", "U"), ("assistant", "A"), ("user", "V")]);
    let got = ChatTemplate::chatml(None, None).apply(&m, true, None).unwrap();
    assert_eq!(
        got,
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n\
         <|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\nV<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(render(CHATML_TEMPLATE, &m), got);
}

#[test]
fn raise_exception_is_an_error() {
    let tpl = ChatTemplate::new(
        "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok",
        None,
        None,
    )
    .unwrap();
    assert_eq!(tpl.apply(&msgs(&[("user", "x")]), true, None).unwrap(), "ok");
    let err = tpl.apply(&msgs(&[("assistant", "x")]), true, None).unwrap_err();
    assert!(matches!(&err, TokenizerError::Encode(m) if m.contains("first must be user")), "{err}");
}

#[test]
fn tojson_matches_python_json_dumps() {
    // Expected strings from Python: json.dumps(x, ensure_ascii=False) and json.dumps(x, indent=2).
    let m = msgs(&[("user", "é<>&'\"\n")]);
    let got = render(r#"{{ {"b": 1, "a": [1, 2.5, none, true], "s": messages[0].content} | tojson }}"#, &m);
    assert_eq!(got, r#"{"b": 1, "a": [1, 2.5, null, true], "s": "é<>&'\"\n"}"#);
    let got = render(r#"{{ {"b": 1, "a": [1, {}], "c": []} | tojson(indent=2) }}"#, &m);
    assert_eq!(got, "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    {}\n  ],\n  \"c\": []\n}");
    assert_eq!(render("{{ messages[0] | tojson }}", &m), r#"{"role": "user", "content": "é<>&'\"\n"}"#);
}

#[test]
fn python_methods_loop_controls_and_block_trimming() {
    let m = msgs(&[("user", " a,b "), ("assistant", "x"), ("user", "stop")]);
    let tpl = "{% for msg in messages %}\n\
               {% if msg.content == 'x' %}{% break %}{% endif %}\n\
               [{{ msg.content.strip().split(',') | join('|') }}{{ msg.role.upper() }}{{ msg.content.startswith(' a') }}]\n\
               {% endfor %}";
    // trim_blocks/lstrip_blocks (as in HF) remove the newlines after block tags; booleans
    // print as Python does (True).
    assert_eq!(render(tpl, &m), "[a|bUSERTrue]\n");
    let year = render("{{ strftime_now('%Y') }}", &m);
    assert!(year.len() == 4 && year.as_str() >= "2024", "{year}");
}

#[test]
fn bos_eos_and_undefined_tools() {
    let tpl = ChatTemplate::new(
        "{{ bos_token }}{% if tools is not none %}T{% endif %}{{ messages[0].content }}{{ eos_token }}",
        Some("<s>".into()),
        Some("</s>".into()),
    )
    .unwrap();
    assert_eq!(tpl.apply(&msgs(&[("user", "hi")]), false, None).unwrap(), "<s>hi</s>");
}

#[test]
fn bad_template_is_a_build_error() {
    let err = ChatTemplate::new("{% for x in %}", None, None).unwrap_err();
    assert!(matches!(err, TokenizerError::Build(_)), "{err}");
}

/// The official Qwen2.5-Instruct template (HF `tokenizer_config.json`), with its `# Tools`
/// system section and `<tool_call>` / `<tool_response>` rendering.
const QWEN25_TEMPLATE: &str = include_str!("fixtures/qwen2.5_instruct_chat_template.jinja");

fn weather_tool() -> serde_json::Value {
    serde_json::json!({
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"]
            }
        }
    })
}

/// user -> assistant tool call (arguments as the OpenAI JSON *string*) -> tool result.
fn tool_conversation() -> Vec<ChatMessage> {
    let call = serde_json::json!({
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}
    });
    vec![
        ChatMessage::new("user", "Weather in Paris?"),
        ChatMessage::new("assistant", "").with_tool_calls(vec![call]),
        ChatMessage::tool_result("call_1", "{\"temp_c\": 21}"),
    ]
}

/// Checks a Qwen2.5 rendering of [`tool_conversation`] with [`weather_tool`].
fn assert_qwen_tool_rendering(got: &str) {
    // The tool list: one JSON object per line between <tools> tags. Compared as JSON because
    // key order follows serde_json's map (sorted without its `preserve_order` feature).
    let start = got.find("<tools>\n").expect("tools section") + "<tools>\n".len();
    let end = got.find("\n</tools>").expect("tools section end");
    let listed: Vec<serde_json::Value> = got[start..end].lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(listed, vec![weather_tool()]);
    assert!(
        got.starts_with(
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\n"
        ),
        "{got}"
    );
    // Python's json.dumps separators inside the tool line too.
    assert!(got.contains("\"name\": \"get_weather\""), "{got}");
    let tail = "<|im_start|>user\nWeather in Paris?<|im_end|>\n\
                <|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n\
                <|im_start|>user\n<tool_response>\n{\"temp_c\": 21}\n</tool_response><|im_end|>\n\
                <|im_start|>assistant\n";
    assert!(got.ends_with(tail), "{got}");
    assert!(got.contains(
        "</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
    ));
}

#[test]
fn qwen25_template_renders_tools_calls_and_results() {
    let tpl = ChatTemplate::new(QWEN25_TEMPLATE, None, Some("<|im_end|>".into())).unwrap();
    assert!(tpl.supports_tools());
    let tools = [weather_tool()];
    let got = tpl.apply_with_tools(&tool_conversation(), true, None, Some(&tools)).unwrap();
    assert_qwen_tool_rendering(&got);

    // Arguments already given as an object render the same.
    let mut conv = tool_conversation();
    conv[1] = ChatMessage::new("assistant", "").with_tool_calls(vec![serde_json::json!({
        "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}
    })]);
    assert_eq!(tpl.apply_with_tools(&conv, true, None, Some(&tools)).unwrap(), got);

    // Without tools the template takes its plain branch; `apply` is `apply_with_tools(None)`.
    let plain = tpl.apply(&tool_conversation(), true, None).unwrap();
    assert!(!plain.contains("# Tools"), "{plain}");
    assert!(plain.contains("<tool_call>\n{\"name\": \"get_weather\""));
    assert_eq!(plain, tpl.apply_with_tools(&tool_conversation(), true, None, None).unwrap());
}

/// The GGUF's own template (Qwen2.5-Coder ships the same tool section) renders tools alike.
#[test]
fn qwen25_coder_gguf_template_renders_tools() {
    let Some(tok) = load_tokenizer(QWEN25_CODER) else {
        return;
    };
    let tpl = ChatTemplate::for_tokenizer(&tok).unwrap();
    assert!(tpl.supports_tools());
    let got = tpl.apply_with_tools(&tool_conversation(), true, None, Some(&[weather_tool()])).unwrap();
    assert_qwen_tool_rendering(&got);
}

#[test]
fn supports_tools_only_for_templates_that_read_them() {
    assert!(!ChatTemplate::chatml(None, None).supports_tools());
    assert!(ChatTemplate::new("{% if tools %}T{% endif %}", None, None).unwrap().supports_tools());
    // `tools` as a loop variable is not the context's `tools`.
    assert!(!ChatTemplate::new("{% for tools in messages %}{{ tools.role }}{% endfor %}", None, None)
        .unwrap()
        .supports_tools());
    if let Some(tok) = load_tokenizer(SMOLLM2) {
        assert!(!ChatTemplate::for_tokenizer(&tok).unwrap().supports_tools());
    }
}

#[test]
fn absent_optional_fields_are_not_template_variables() {
    // HF templates branch on `message.tool_calls is defined` / truthiness: a plain message must
    // not carry the optional keys at all.
    let m = vec![ChatMessage::new("user", "hi")];
    assert_eq!(render("{{ messages[0] | tojson }}", &m), r#"{"role": "user", "content": "hi"}"#);
    let t = vec![ChatMessage::tool_result("call_9", "42")];
    assert_eq!(render("{{ messages[0].tool_call_id }}|{{ messages[0].name is defined }}", &t), "call_9|False");
}
