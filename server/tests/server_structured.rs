//! Structured outputs and tool calling over HTTP, through the official `openai` client's own
//! types (`beta.chat.completions.parse` with a pydantic model, typed `tool_calls`), with the
//! outputs checked by an independent JSON Schema validator.

use entrobatch_testkit::server as server_support;

use std::process::Command;

use serde_json::{json, Value};
use server_support::{engine_config, smollm2_path, TestServer};

fn run_client(server: &TestServer, mode: &str) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/structured_check.py");
    let model = server.engine.info().model_name.clone();
    let output =
        Command::new("python3").args([script, &server.base_url(), &model, mode]).output().expect("run python3");
    assert!(output.status.success(), "openai client failed:\n{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("script prints JSON")
}

fn assert_valid(schema: &Value, instance: &Value) {
    let validator = jsonschema::validator_for(schema).expect("valid schema");
    let errors: Vec<String> = validator.iter_errors(instance).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{instance} does not match {schema}: {errors:?}");
}

/// Numbers as f64, so `3` and pydantic's `3.0` compare equal.
fn as_floats(v: &Value) -> Value {
    match v {
        Value::Number(n) => json!(n.as_f64()),
        Value::Array(a) => Value::Array(a.iter().map(as_floats).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), as_floats(v))).collect()),
        other => other.clone(),
    }
}

#[test]
fn the_openai_client_gets_schema_valid_objects_on_smollm2() {
    let server = TestServer::start(engine_config(smollm2_path()));
    let seen = run_client(&server, "structured");

    let parse = &seen["parse"];
    assert_eq!(parse["finish_reason"], json!("stop"), "{parse}");
    let parsed = &parse["parsed"];
    assert!(parsed.is_object(), "the client could not parse the reply: {parse}");
    let content: Value = serde_json::from_str(parse["content"].as_str().expect("content")).expect("JSON content");
    assert_valid(&parse["schema"], &content);
    assert_eq!(as_floats(&content), as_floats(parsed), "the client's parsed object is the reply itself");

    assert!(["yes", "no", "sometimes"].contains(&seen["guided_choice"].as_str().unwrap_or("")), "{seen}");
    let code = seen["regex"].as_str().expect("regex text");
    assert!(
        code.len() == 8
            && code[..3].bytes().all(|b| b.is_ascii_uppercase())
            && &code[3..4] == "-"
            && code[4..].bytes().all(|b| b.is_ascii_digit()),
        "{code:?}"
    );
    let streamed = &seen["json_object_stream"];
    assert_eq!(streamed["finish_reason"], json!("stop"), "{streamed}");
    let object: Value = serde_json::from_str(streamed["text"].as_str().unwrap_or("")).expect("streamed JSON");
    assert!(object.is_object(), "{object}");
    assert_eq!(seen["bad_schema"]["status"], json!(400), "{seen}");
    assert_eq!(server.engine.in_flight(), 0);
    assert!(server.metric("entrobatch_structured_output_masks_total") > 0.0);
}

/// Tool calling on Qwen2.5-Coder-0.5B-Instruct (the test command fetches it): `required`
/// forces a valid call by grammar, `auto` lets the model choose and parses what it writes
/// (constrained to valid calls when a tool is `strict`),
/// the call streams as OpenAI's deltas, and the tool's answer comes back as the final text.
#[test]
fn a_tool_round_trip_on_qwen_coder() {
    let path =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    assert!(
        path.is_file(),
        "{} missing: scripts/test fetches it (scripts/fetch-model qwen2.5-coder-0.5b)",
        path.display()
    );
    let server = TestServer::start(engine_config(path));
    assert!(server.engine.supports_tools());
    let seen = run_client(&server, "tools");
    let parameters = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"],
    });
    let check_call = |call: &Value| {
        assert_eq!(call["name"], json!("get_weather"), "{call}");
        assert!(call["id"].as_str().is_some_and(|id| id.starts_with("call_")), "{call}");
        let args: Value = serde_json::from_str(call["arguments"].as_str().expect("arguments")).expect("JSON arguments");
        assert_valid(&parameters, &args);
    };
    let required = &seen["call_required"];
    assert_eq!(required["finish_reason"], json!("tool_calls"), "{required}");
    let calls = required["calls"].as_array().expect("calls");
    assert!(!calls.is_empty(), "{required}");
    calls.iter().for_each(check_call);
    // `auto`: whatever the model wrote is either a parsed call or text, never a call left
    // inside the content.
    let auto = &seen["call_auto"];
    match auto["calls"].as_array().map(Vec::len) {
        Some(n) if n > 0 => {
            assert_eq!(auto["finish_reason"], json!("tool_calls"), "{auto}");
            auto["calls"].as_array().into_iter().flatten().for_each(check_call);
        }
        _ => assert!(!auto["content"].as_str().unwrap_or("").contains("\"get_weather\""), "unparsed call: {auto}"),
    }
    // `auto` with a `strict` tool: the model still chooses to call, and the call's arguments
    // match the strict schema, fields the question never asked for included.
    let strict = &seen["call_strict"];
    assert_eq!(strict["finish_reason"], json!("tool_calls"), "{strict}");
    let strict_parameters = &strict["parameters"];
    assert_eq!(strict_parameters["required"].as_array().map(Vec::len), Some(4), "{strict}");
    for call in strict["calls"].as_array().expect("strict calls") {
        assert_eq!(call["name"], json!("get_forecast"), "{call}");
        let args: Value = serde_json::from_str(call["arguments"].as_str().expect("arguments")).expect("JSON arguments");
        assert_valid(strict_parameters, &args);
    }
    let stream = &seen["call_stream"];
    assert_eq!(stream["finish_reason"], json!("tool_calls"), "{stream}");
    for call in stream["calls"].as_array().expect("streamed calls") {
        assert!(call["deltas"].as_u64().unwrap_or(0) >= 2, "id and name first, then arguments: {call}");
        check_call(call);
    }
    let round = &seen["round_trip"];
    assert!(round["content"].as_str().is_some_and(|c| !c.trim().is_empty()), "{round}");
    assert!(["stop", "length", "tool_calls"].contains(&round["finish_reason"].as_str().unwrap_or("")), "{round}");
    assert!(seen["round_trip_stream"].as_str().is_some_and(|c| !c.trim().is_empty()), "{seen}");
}

/// A model whose chat template cannot render tools (SmolLM2's) gets them in the generic
/// format: described in a system message, a required call constrained to a valid one, earlier
/// tool turns rendered as text, and `response_format` beside them refused.
#[test]
fn tools_on_smollm2_use_the_generic_format() {
    let server = TestServer::start(engine_config(smollm2_path()));
    assert!(!server.engine.supports_tools());
    let parameters = json!({
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]}},
        "required": ["city"],
        "additionalProperties": false,
    });
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city", "parameters": parameters}}]);
    let question = json!([{"role": "user", "content": "What is the weather in Paris right now?"}]);
    let plain = server.post_json("/v1/chat/completions", &json!({"messages": question, "max_tokens": 1}));
    let body =
        json!({"messages": question, "tools": tools, "tool_choice": "required", "max_tokens": 60, "temperature": 0});
    let r = server.post_json("/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let reply = r.json();
    let described = reply["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    assert!(
        described > plain.json()["usage"]["prompt_tokens"].as_u64().unwrap_or(0) + 30,
        "the tools are in the prompt: {reply}"
    );
    let choice = &reply["choices"][0];
    assert_eq!(choice["finish_reason"], json!("tool_calls"), "{choice}");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], json!("get_weather"), "{choice}");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().expect("arguments")).expect("JSON");
    assert_valid(&parameters, &args);

    // Under `auto` an answer that opens like JSON must be a valid call; prose is free.
    let auto = server.post_json(
        "/v1/chat/completions",
        &json!({"messages": question, "tools": tools, "max_tokens": 40, "temperature": 0}),
    );
    assert_eq!(auto.status, 200, "{}", auto.text());
    let message = &auto.json()["choices"][0]["message"];
    let content = message["content"].as_str().unwrap_or("");
    assert!(message["tool_calls"].is_array() || !content.trim_start().starts_with(['{', '[']), "{message}");

    // The round trip: the call and its result render as text the template can show.
    let history = json!([
        {"role": "user", "content": "What is the weather in Paris right now?"},
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "{\"temperature_c\": 18}"},
    ]);
    let r = server.post_json(
        "/v1/chat/completions",
        &json!({"messages": history, "tools": tools, "tool_choice": "none", "max_tokens": 20, "temperature": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["usage"]["prompt_tokens"].as_u64().unwrap_or(0) > described, "{}", r.text());
    assert!(r.json()["choices"][0]["message"].get("tool_calls").is_none(), "tool_choice none: no calls");

    let both = json!({"messages": question, "tools": tools, "response_format": {"type": "json_object"}});
    let r = server.post_json("/v1/chat/completions", &both);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["param"], json!("tool_choice"), "{}", r.text());
}

/// OpenAI contract details through the client's own types: `usage.prompt_tokens_details.
/// cached_tokens` (a repeated prompt comes from the prefix cache), a stable
/// `system_fingerprint` in responses and every chunk, and response ids that do not repeat
/// when the server restarts.
#[test]
fn cached_tokens_fingerprint_and_ids_unique_across_restarts() {
    let first_id = {
        let server = TestServer::start(engine_config(smollm2_path()));
        let seen = run_client(&server, "contract");
        let repeat = seen["repeat"].as_array().expect("two responses");
        assert_eq!(repeat[0]["cached_tokens"], json!(0), "{seen}");
        let cached = repeat[1]["cached_tokens"].as_u64().expect("cached_tokens");
        let prompt = repeat[1]["prompt_tokens"].as_u64().expect("prompt_tokens");
        assert!(cached >= 16 && cached < prompt, "{seen}");
        let fingerprint = repeat[0]["fingerprint"].as_str().expect("fingerprint");
        assert!(fingerprint.starts_with("fp_"), "{seen}");
        assert_eq!(repeat[1]["fingerprint"], json!(fingerprint));
        assert_eq!(seen["stream"]["fingerprints"], json!([fingerprint]), "{seen}");
        assert_eq!(seen["stream"]["none"], json!(false), "every chunk carries the fingerprint: {seen}");
        assert!(seen["stream"]["cached_tokens"].as_u64().is_some_and(|c| c >= 16), "{seen}");
        assert_ne!(repeat[0]["id"], repeat[1]["id"]);
        repeat[0]["id"].clone()
    };
    let server = TestServer::start(engine_config(smollm2_path()));
    let seen = run_client(&server, "contract");
    assert_ne!(seen["repeat"][0]["id"], first_id, "a restarted server repeated a response id");
}
