//! OpenAI/vLLM contract details: server-level generation defaults, continuing a final
//! assistant message, and conversations the template cannot render as given.

mod server_support;

use entrobatch::server::{GenerationDefaults, ServerConfig};
use entrobatch::{GenerationParams, Prompt, SamplingParams};
use serde_json::json;
use server_support::{engine_config, smollm2_path, TestServer};

/// `--override-generation-config`: a request that leaves a field out gets the server's
/// default; a request that sends it keeps its own. `/v1/models` shows the defaults.
#[test]
fn generation_defaults_apply_to_fields_a_request_leaves_out() {
    let defaults = GenerationDefaults { temperature: Some(0.0), max_tokens: Some(6), ..Default::default() };
    let config = ServerConfig { generation_defaults: defaults, ..ServerConfig::default() };
    let server = TestServer::start_with(engine_config(smollm2_path()), config);
    let body = json!({ "prompt": "The quick brown fox", "ignore_eos": true, "return_token_ids": true });
    let r = server.post_json("/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let ids = r.json()["choices"][0]["token_ids"].clone();
    let greedy =
        GenerationParams { sampling: SamplingParams::greedy(), max_tokens: 6, ignore_eos: true, ..Default::default() };
    let reference =
        server.engine.generate(vec![Prompt::Text("The quick brown fox".into())], &greedy).expect("generate");
    assert_eq!(ids, json!(reference[0].token_ids), "the default temperature 0 and max_tokens 6 apply");
    let r = server
        .post_json("/v1/completions", &json!({ "prompt": "The quick brown fox", "ignore_eos": true, "max_tokens": 3 }));
    assert_eq!(r.json()["usage"]["completion_tokens"], json!(3), "the request's own max_tokens wins");
    let models = server.get("/v1/models").json();
    assert_eq!(models["data"][0]["generation_defaults"], json!({ "temperature": 0.0, "max_tokens": 6 }));
    assert!(GenerationDefaults::from_json(r#"{"temprature": 0.5}"#).is_err(), "a misspelled key is refused");
}

/// `continue_final_message`: the prompt ends inside the final assistant message, so the
/// output continues it: the same tokens as the conversation rendered by hand (ChatML, as
/// SmolLM2's template writes it) through `/v1/completions`.
#[test]
fn continue_final_message_continues_the_assistant_text() {
    let server = TestServer::start(engine_config(smollm2_path()));
    let prefix = "The capital of France is";
    let chat = json!({
        "messages": [
            { "role": "system", "content": "You are terse." },
            { "role": "user", "content": "What is the capital of France?" },
            { "role": "assistant", "content": prefix },
        ],
        "continue_final_message": true,
        "add_generation_prompt": false,
        "max_tokens": 8,
        "temperature": 0,
        "return_token_ids": true,
    });
    let r = server.post_json("/v1/chat/completions", &chat);
    assert_eq!(r.status, 200, "{}", r.text());
    let by_hand = format!(
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n{prefix}"
    );
    let c = server.post_json(
        "/v1/completions",
        &json!({ "prompt": by_hand, "max_tokens": 8, "temperature": 0, "return_token_ids": true }),
    );
    assert_eq!(c.status, 200, "{}", c.text());
    assert_eq!(r.json()["usage"]["prompt_tokens"], c.json()["usage"]["prompt_tokens"]);
    assert_eq!(r.json()["choices"][0]["token_ids"], c.json()["choices"][0]["token_ids"]);
    assert_eq!(r.json()["choices"][0]["message"]["content"], c.json()["choices"][0]["text"]);

    let mut both = chat.clone();
    both["add_generation_prompt"] = json!(true);
    let mut no_assistant = chat.clone();
    no_assistant["messages"] = json!([{ "role": "user", "content": "hi" }]);
    let orphan_tool = json!({ "messages": [
        { "role": "user", "content": "hi" },
        { "role": "assistant", "content": "hello" },
        { "role": "tool", "tool_call_id": "call_1", "content": "42" },
    ] });
    for (name, body, param) in [
        ("both switches", both, "continue_final_message"),
        ("nothing to continue", no_assistant, "continue_final_message"),
        ("a tool message answering no call", orphan_tool, "messages[2]"),
    ] {
        let r = server.post_json("/v1/chat/completions", &body);
        assert_eq!(r.status, 400, "{name}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], json!(param), "{name}: {}", r.text());
    }
}
