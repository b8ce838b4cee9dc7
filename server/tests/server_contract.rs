//! OpenAI/vLLM contract details: server-level generation defaults (overrides, and the
//! model's own recommendations with `--generation-config auto`), continuing a final
//! assistant message, and conversations the template cannot render as given.

use entrobatch_testkit::server as server_support;

use std::path::Path;

use candle_core::quantized::gguf_file::Value as GgufValue;
use entrobatch::model_runner::testing::unique_test_path;
use entrobatch::model_runner::testing_hf::{write_tiny_hf, TinyHfSpec};
use entrobatch::{GenerationParams, Prompt, SamplingParams};
use entrobatch_server::{GenerationConfig, GenerationDefaults, ServerConfig};
use serde_json::{json, Value};
use server_support::{engine_config, smollm2_path, tiny_model_with, TestServer};

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

/// A server whose defaults are `GenerationDefaults::resolve`d as `serve` does it.
fn serve_resolved(model: &Path, source: GenerationConfig, overrides: GenerationDefaults) -> TestServer {
    let generation_defaults = GenerationDefaults::resolve(source, model, &overrides).expect("resolve defaults");
    let config = ServerConfig { generation_defaults, ..ServerConfig::default() };
    TestServer::start_with(engine_config(model.to_path_buf()), config)
}

/// The card of `GET /v1/models/{id}`.
fn model_card(server: &TestServer) -> Value {
    let id = server.get("/v1/models").json()["data"][0]["id"].as_str().map(str::to_string).expect("model id");
    server.get(&format!("/v1/models/{id}")).json()
}

fn completion_ids(server: &TestServer, extra: Value) -> Value {
    let mut body = json!({ "prompt": [5, 17, 42, 99], "max_tokens": 12, "ignore_eos": true, "return_token_ids": true });
    body.as_object_mut().expect("object").extend(extra.as_object().cloned().unwrap_or_default());
    let r = server.post_json("/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["choices"][0]["token_ids"].clone()
}

/// `--generation-config auto` on a GGUF: its `general.sampling.*` keys become the defaults
/// (temperature 0 here, so a request that leaves temperature out decodes greedily), a
/// request's own value wins, `--override-generation-config` wins over the file, and the card
/// shows what is in force. `none` (the default) ignores the file.
#[test]
fn generation_config_auto_takes_a_gguf_s_recommended_sampling() {
    let path = tiny_model_with(
        "recommends",
        vec![
            ("general.sampling.temp", GgufValue::F32(0.0)),
            ("general.sampling.top_k", GgufValue::U32(20)),
            ("general.sampling.top_p", GgufValue::F32(0.9)),
        ],
    );
    let greedy =
        GenerationParams { sampling: SamplingParams::greedy(), max_tokens: 12, ignore_eos: true, ..Default::default() };

    let auto = serve_resolved(&path, GenerationConfig::Auto, GenerationDefaults::default());
    assert_eq!(model_card(&auto)["generation_defaults"], json!({ "temperature": 0.0, "top_p": 0.9f32, "top_k": 20 }));
    let reference = auto.engine.generate(vec![Prompt::TokenIds(vec![5, 17, 42, 99])], &greedy).expect("generate");
    let greedy_ids = json!(reference[0].token_ids);
    assert_eq!(completion_ids(&auto, json!({ "seed": 1 })), greedy_ids, "the file's temperature 0 applies");
    let sampled = completion_ids(&auto, json!({ "seed": 1, "temperature": 1.0 }));
    assert_ne!(sampled, greedy_ids, "the request's own temperature wins");
    drop(auto);

    let overridden = serve_resolved(
        &path,
        GenerationConfig::Auto,
        GenerationDefaults { temperature: Some(1.0), ..GenerationDefaults::default() },
    );
    assert_eq!(
        model_card(&overridden)["generation_defaults"],
        json!({ "temperature": 1.0, "top_p": 0.9f32, "top_k": 20 }),
        "the override replaces the file's temperature and keeps the rest"
    );
    assert_eq!(completion_ids(&overridden, json!({ "seed": 1 })), sampled, "temperature 1 from the override");
    drop(overridden);

    let none = serve_resolved(&path, GenerationConfig::None, GenerationDefaults::default());
    assert_eq!(model_card(&none)["generation_defaults"], json!({}), "`none` ignores the file");
}

/// `--generation-config auto` on a checkpoint directory: `generation_config.json`'s sampling
/// keys, with `max_new_tokens` as the default `max_tokens`.
#[test]
fn generation_config_auto_reads_a_checkpoint_s_generation_config_json() {
    let dir = unique_test_path(env!("CARGO_TARGET_TMPDIR"), "hf-recommends");
    write_tiny_hf(&dir, &TinyHfSpec::qwen2()).expect("write checkpoint");
    let file = dir.join("generation_config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    config.as_object_mut().expect("object").extend([
        ("temperature".to_string(), json!(0.0)),
        ("repetition_penalty".to_string(), json!(1.0)),
        ("max_new_tokens".to_string(), json!(5)),
    ]);
    std::fs::write(&file, config.to_string()).expect("write generation_config");
    let server = serve_resolved(
        &dir,
        GenerationConfig::Auto,
        GenerationDefaults { top_k: Some(5), ..GenerationDefaults::default() },
    );
    assert_eq!(
        model_card(&server)["generation_defaults"],
        json!({ "temperature": 0.0, "top_k": 5, "max_tokens": 5, "repetition_penalty": 1.0 })
    );
    assert_eq!(completion_ids(&server, json!({ "max_tokens": null })).as_array().map(Vec::len), Some(5));
    assert_eq!(completion_ids(&server, json!({ "max_tokens": 3 })).as_array().map(Vec::len), Some(3));
}
