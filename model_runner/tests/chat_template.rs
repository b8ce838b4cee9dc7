//! ChatTemplate: real GGUF templates, a Qwen3-style thinking switch, and the HF helpers.

mod common;

use common::{load_tokenizer, QWEN25_CODER, SMOLLM2};
use entrobatch_model_runner::chat_template::{ChatMessage, ChatTemplate, CHATML_TEMPLATE};
use entrobatch_model_runner::tokenizer::TokenizerError;

fn msgs(pairs: &[(&str, &str)]) -> Vec<ChatMessage> {
    pairs
        .iter()
        .map(|(r, c)| ChatMessage::new(*r, *c))
        .collect()
}

fn render(template: &str, messages: &[ChatMessage]) -> String {
    ChatTemplate::new(template, None, None)
        .unwrap()
        .apply(messages, true, None)
        .unwrap()
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
    let expected = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
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
    const DEFAULT_SYS: &str = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n";
    // Qwen2.5's template supplies its own default system prompt.
    assert_eq!(
        tpl.apply(&msgs(&[("user", "Hi")]), true, None).unwrap(),
        format!("{DEFAULT_SYS}<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    );
    let multi = msgs(&[
        ("system", "Be brief."),
        ("user", "Hi"),
        ("assistant", "Hello!"),
        ("user", "Bye"),
    ]);
    assert_eq!(
        tpl.apply(&multi, true, None).unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"
    );
    // Consecutive tool results are merged into one user turn (loop.index0 / loop.last logic).
    let tools = msgs(&[
        ("user", "Q"),
        ("assistant", "calling"),
        ("tool", "R1"),
        ("tool", "R2"),
    ]);
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
    assert_eq!(
        tpl.apply(&m, true, Some(false)).unwrap(),
        format!("{base}<think>\n\n</think>\n\n")
    );
}

#[test]
fn chatml_fallback() {
    let m = msgs(&[
        ("system", "S"),
        ("user", "U"),
        ("assistant", "A"),
        ("user", "V"),
    ]);
    let got = ChatTemplate::chatml(None, None)
        .apply(&m, true, None)
        .unwrap();
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
    assert_eq!(
        tpl.apply(&msgs(&[("user", "x")]), true, None).unwrap(),
        "ok"
    );
    let err = tpl
        .apply(&msgs(&[("assistant", "x")]), true, None)
        .unwrap_err();
    assert!(
        matches!(&err, TokenizerError::Encode(m) if m.contains("first must be user")),
        "{err}"
    );
}

#[test]
fn tojson_matches_python_json_dumps() {
    // Expected strings from Python: json.dumps(x, ensure_ascii=False) and json.dumps(x, indent=2).
    let m = msgs(&[("user", "é<>&'\"\n")]);
    let got = render(
        r#"{{ {"b": 1, "a": [1, 2.5, none, true], "s": messages[0].content} | tojson }}"#,
        &m,
    );
    assert_eq!(
        got,
        r#"{"b": 1, "a": [1, 2.5, null, true], "s": "é<>&'\"\n"}"#
    );
    let got = render(
        r#"{{ {"b": 1, "a": [1, {}], "c": []} | tojson(indent=2) }}"#,
        &m,
    );
    assert_eq!(
        got,
        "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    {}\n  ],\n  \"c\": []\n}"
    );
    assert_eq!(
        render("{{ messages[0] | tojson }}", &m),
        r#"{"role": "user", "content": "é<>&'\"\n"}"#
    );
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
    assert_eq!(
        tpl.apply(&msgs(&[("user", "hi")]), false, None).unwrap(),
        "<s>hi</s>"
    );
}

#[test]
fn bad_template_is_a_build_error() {
    let err = ChatTemplate::new("{% for x in %}", None, None).unwrap_err();
    assert!(matches!(err, TokenizerError::Build(_)), "{err}");
}
