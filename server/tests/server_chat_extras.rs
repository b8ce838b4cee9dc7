//! Chat extras from vLLM's API on tiny models with templates of the tests' own:
//! `chat_template_kwargs` as template variables, `echo`, and a conversation the template
//! refuses (`raise_exception`) as a 400 naming the message.

use entrobatch_testkit::server as server_support;

use candle_core::quantized::gguf_file::Value as GgufValue;
use entrobatch::{GenerationParams, Prompt, SamplingParams};
use serde_json::{json, Value};
use server_support::{engine_config, tiny_model, tiny_model_with, TestServer};

/// ChatML, plus a line the generation prompt writes from three kwargs when they are given.
const KWARGS_TEMPLATE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n{% if persona is defined %}[{{ persona }}|{{ level * 2 }}|{{ flags.tag }}]{% endif %}{% endif %}";

/// ChatML that insists on user/assistant alternation, as Llama 2's and Mistral's templates do.
const ALTERNATING_TEMPLATE: &str = "{% for m in messages %}{% if (m.role == 'user') != loop.index0 is even %}\
{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}\
<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

fn with_template(name: &str, template: &str) -> TestServer {
    let path = tiny_model_with(name, vec![("tokenizer.chat_template", GgufValue::String(template.into()))]);
    TestServer::start(engine_config(path))
}

fn greedy(max_tokens: usize) -> GenerationParams {
    GenerationParams { sampling: SamplingParams::greedy(), max_tokens, ignore_eos: true, ..GenerationParams::default() }
}

fn chat(server: &TestServer, body: Value) -> Value {
    let r = server.post_json("/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// Every key of `chat_template_kwargs` is a template variable, of whatever JSON type: the
/// prompt is the template rendered with them (the same tokens as that text typed out, and the
/// same greedy output). Names the server sets itself, and a non-boolean `enable_thinking`,
/// are 400s.
#[test]
fn chat_template_kwargs_are_template_variables() {
    let server = with_template("kwargs", KWARGS_TEMPLATE);
    let body = |kwargs: Value| {
        json!({ "messages": [{ "role": "user", "content": "hi" }], "chat_template_kwargs": kwargs,
            "max_tokens": 6, "temperature": 0, "ignore_eos": true, "return_token_ids": true })
    };
    let r = chat(&server, body(json!({ "persona": "pirate", "level": 21, "flags": { "tag": "x" } })));
    let by_hand = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
    let ids = server.engine.tokenizer().encode(&format!("{by_hand}[pirate|42|x]"), false).expect("encode");
    assert_eq!(r["usage"]["prompt_tokens"], json!(ids.len()));
    let reference = server.engine.generate(vec![Prompt::TokenIds(ids)], &greedy(6)).expect("generate");
    assert_eq!(r["choices"][0]["token_ids"], json!(reference[0].token_ids));
    let without = chat(&server, body(Value::Null));
    let plain = server.engine.tokenizer().encode(by_hand, false).expect("encode");
    assert_eq!(without["usage"]["prompt_tokens"], json!(plain.len()), "no kwargs, no bracket line");

    for (kwargs, param) in [
        (json!({ "messages": [] }), "chat_template_kwargs"),
        (json!({ "add_generation_prompt": false }), "chat_template_kwargs"),
        (json!({ "enable_thinking": "yes" }), "chat_template_kwargs.enable_thinking"),
    ] {
        let r = server.post_json("/v1/chat/completions", &body(kwargs.clone()));
        assert_eq!(r.status, 400, "{kwargs}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], json!(param), "{kwargs}");
    }
}

/// `echo` returns the final assistant message in front of the output: whole (the message's
/// content, then the same greedy text as without echo), and streamed (a chunk of its own right
/// after the role chunk). A conversation that ends with a user message has nothing to echo.
#[test]
fn echo_returns_the_final_assistant_message_first() {
    let server = TestServer::start(engine_config(tiny_model("echo", 512)));
    let prefix = "Once upon";
    let continued = json!({
        "messages": [{ "role": "user", "content": "tell" }, { "role": "assistant", "content": prefix }],
        "continue_final_message": true, "add_generation_prompt": false,
        "max_tokens": 6, "temperature": 0, "ignore_eos": true,
    });
    let with = |body: &Value, extra: Value| {
        let mut body = body.clone();
        body.as_object_mut().expect("object").extend(extra.as_object().cloned().unwrap_or_default());
        body
    };
    let content = |r: &Value| r["choices"][0]["message"]["content"].as_str().map(str::to_string).expect("content");
    let plain = content(&chat(&server, continued.clone()));
    let echoed = content(&chat(&server, with(&continued, json!({ "echo": true }))));
    assert_eq!(echoed, format!("{prefix}{plain}"));

    let r = server.post_json("/v1/chat/completions", &with(&continued, json!({ "echo": true, "stream": true })));
    assert_eq!(r.status, 200, "{}", r.text());
    let chunks: Vec<Value> =
        r.sse_data().iter().filter(|d| *d != "[DONE]").map(|d| serde_json::from_str(d).expect("chunk JSON")).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"], json!({ "role": "assistant", "content": "" }));
    assert_eq!(chunks[1]["choices"][0]["delta"], json!({ "content": prefix }), "the echo comes first, alone");
    let streamed: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(streamed, echoed);

    let user_last = json!({ "messages": [{ "role": "user", "content": "tell" }], "max_tokens": 6, "temperature": 0,
        "ignore_eos": true });
    let no_echo = content(&chat(&server, user_last.clone()));
    assert_eq!(content(&chat(&server, with(&user_last, json!({ "echo": true })))), no_echo);
}

/// A conversation the template refuses is a 400 naming the first message it refuses, on
/// both routes that render chats and streamed or not; a template that takes any order
/// (ChatML) renders the same conversation.
#[test]
fn a_conversation_the_template_refuses_is_a_400_naming_the_message() {
    let server = with_template("alternating", ALTERNATING_TEMPLATE);
    let turns = |roles: &[&str]| -> Value {
        Value::Array(roles.iter().map(|r| json!({ "role": r, "content": format!("{r} says") })).collect())
    };
    let ok = json!({ "messages": turns(&["user", "assistant", "user"]), "max_tokens": 2 });
    chat(&server, ok);
    for (roles, stream, param) in [
        (&["user", "assistant", "assistant"][..], false, "messages[2]"),
        (&["user", "user", "assistant"][..], false, "messages[1]"),
        (&["user", "user"][..], true, "messages[1]"),
        (&["assistant"][..], false, "messages[0]"),
        (
            &["user", "assistant", "user", "assistant", "user", "assistant", "assistant", "user", "assistant"][..],
            false,
            "messages[6]",
        ),
    ] {
        let body = json!({ "messages": turns(roles), "max_tokens": 2, "stream": stream });
        let r = server.post_json("/v1/chat/completions", &body);
        assert_eq!(r.status, 400, "{roles:?}: {}", r.text());
        let error = &r.json()["error"];
        assert_eq!(error["param"], json!(param), "{roles:?}");
        assert!(error["message"].as_str().is_some_and(|m| m.contains("must alternate")), "{error}");
    }
    let r = server.post_json("/tokenize", &json!({ "messages": turns(&["user", "user"]) }));
    assert_eq!((r.status, r.json()["error"]["param"].clone()), (400, json!("messages[1]")), "{}", r.text());

    let any_order = TestServer::start(engine_config(tiny_model("any-order", 512)));
    chat(&any_order, json!({ "messages": turns(&["user", "user"]), "max_tokens": 2 }));
}

/// ChatML that prints an assistant message's `reasoning_content` inside think tags, as
/// Qwen3's template does.
const REASONING_TEMPLATE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n\
{% if m.reasoning_content is defined %}<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// A message's keys beyond OpenAI's reach the template with the message, as in vLLM: the
/// prompt is the template's text with the key printed, and without the key it is not.
#[test]
fn a_messages_other_keys_reach_the_template() {
    let server = with_template("message-keys", REASONING_TEMPLATE);
    let body = |assistant: Value| {
        json!({ "messages": [{ "role": "user", "content": "hi" }, assistant, { "role": "user", "content": "and?" }],
            "max_tokens": 1 })
    };
    let with_key =
        chat(&server, body(json!({ "role": "assistant", "content": "yes", "reasoning_content": "it is 4" })));
    let without = chat(&server, body(json!({ "role": "assistant", "content": "yes" })));
    let text = |reasoning: &str| {
        format!("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n{reasoning}yes<|im_end|>\n<|im_start|>user\nand?<|im_end|>\n<|im_start|>assistant\n")
    };
    let count = |t: &str| server.engine.tokenizer().encode(t, false).expect("encode").len();
    assert_eq!(with_key["usage"]["prompt_tokens"], json!(count(&text("<think>it is 4</think>"))));
    assert_eq!(without["usage"]["prompt_tokens"], json!(count(&text(""))));
}
