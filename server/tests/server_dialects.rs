//! The Anthropic Messages API and Ollama's API, driven by their official Python clients
//! (`anthropic`, `ollama`; installed by `scripts/test`) against the server on Qwen2.5-Coder,
//! and compared with the engine's own greedy output for the same conversation: the same
//! prompt tokens, the same text, the same counts. A tool round trip (call, result, answer),
//! structured output checked by an independent JSON Schema validator, token counting, and the
//! clients' error types on bad input.

use entrobatch_testkit::server as server_support;

use std::path::PathBuf;
use std::process::Command;

use entrobatch::{ChatMessage, GenerationOutput, GenerationParams, Prompt, SamplingParams};
use serde_json::{json, Value};
use server_support::{engine_config, TestServer};

fn qwen_server() -> TestServer {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    assert!(
        path.is_file(),
        "{} missing: scripts/test fetches it (scripts/fetch-model qwen2.5-coder-0.5b)",
        path.display()
    );
    // No prefix cache: a cached prefix regroups the prompt's rows into other forwards, and
    // last-bit differences could flip a near-tie against the reference run.
    let mut config = engine_config(path);
    config.enable_prefix_caching = false;
    TestServer::start(config)
}

fn run_client(server: &TestServer, script: &str, package: &str) -> Value {
    let importable =
        Command::new("python3").args(["-c", &format!("import {package}")]).status().is_ok_and(|s| s.success());
    assert!(importable, "the Python `{package}` package is missing: scripts/test installs it");
    let script = format!("{}/tests/support/{script}", env!("CARGO_MANIFEST_DIR"));
    let model = server.engine.info().model_name.clone();
    let output = Command::new("python3").args([&script, &server.base_url(), &model]).output().expect("run python3");
    assert!(output.status.success(), "{package} client failed:\n{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("script prints JSON")
}

fn greedy(max_tokens: usize) -> GenerationParams {
    GenerationParams { sampling: SamplingParams::greedy(), max_tokens, ..GenerationParams::default() }
}

fn generate(server: &TestServer, messages: Vec<ChatMessage>, params: &GenerationParams) -> GenerationOutput {
    server.engine.generate(vec![Prompt::Chat(messages)], params).expect("generate").remove(0)
}

fn message(v: Value) -> ChatMessage {
    serde_json::from_value(v).expect("chat message")
}

fn assert_valid(schema: &Value, text: &str) {
    let instance: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    let validator = jsonschema::validator_for(schema).expect("valid schema");
    let errors: Vec<String> = validator.iter_errors(&instance).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{instance} does not match {schema}: {errors:?}");
}

/// The weather tool in OpenAI's shape (what the dialects' tools become). Key order reaches
/// the prompt (templates print tools with `tojson`): the `ollama` client serializes a tool's
/// `parameters` with `required` before `properties`.
fn weather_tool(required_first: bool) -> Value {
    let parameters = if required_first {
        json!({"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}})
    } else {
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    };
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": parameters,
    }})
}

/// The tool round trip as the engine sees it, for the reference run.
fn round_trip_messages(arguments: &Value, answer: &str, tool_name: Option<&str>) -> Vec<ChatMessage> {
    let call = json!({"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": arguments.to_string()}});
    let mut tool = message(json!({"role": "tool", "content": answer, "tool_call_id": "call_0"}));
    tool.name = tool_name.map(str::to_string);
    vec![
        ChatMessage::new("user", "What is the weather in Paris right now?"),
        ChatMessage::new("assistant", "").with_tool_calls(vec![call]),
        tool,
    ]
}

/// The final answer of a round trip is the reference run's output, read as the dialect
/// reads it: its prose, and a call of the tool for each call the model wrote.
fn assert_same_answer(text: &str, calls: &[Value], reference: &GenerationOutput) {
    assert!(reference.text.contains(text.trim()), "{text:?} is not in the engine's answer {:?}", reference.text);
    let written = reference.text.matches("\"name\": \"get_weather\"").count();
    assert_eq!(calls.len(), written, "calls {calls:?} against the engine's answer {:?}", reference.text);
    for call in calls {
        let arguments = call.get("input").or_else(|| call.get("arguments")).expect("arguments");
        assert!(reference.text.contains(&arguments["city"].to_string()), "{call} vs {:?}", reference.text);
    }
}

#[test]
fn the_anthropic_sdk_gets_the_engines_answers_on_qwen_coder() {
    let server = qwen_server();
    let seen = run_client(&server, "anthropic_check.py", "anthropic");
    let conversation =
        vec![ChatMessage::new("system", "Answer briefly."), ChatMessage::new("user", "What is the capital of France?")];
    let reference = generate(&server, conversation.clone(), &greedy(24));
    assert!(!reference.text.is_empty());
    let prompt_len = reference.prompt_token_ids.len();
    let stop_reason = if reference.token_ids.len() == 24 { "max_tokens" } else { "end_turn" };
    for (name, text_key) in [("create", "text"), ("stream", "text"), ("stream", "final_text")] {
        let got = &seen[name];
        assert_eq!(got[text_key], json!(reference.text), "{name}: {got}");
        assert_eq!(got["stop_reason"], json!(stop_reason), "{name}: {got}");
        let usage = &got["usage"];
        assert_eq!(usage["output_tokens"], json!(reference.token_ids.len()), "{name}: {usage}");
        let input =
            usage["input_tokens"].as_u64().unwrap_or(0) + usage["cache_read_input_tokens"].as_u64().unwrap_or(0);
        assert_eq!(input as usize, prompt_len, "{name}: {usage}");
    }
    assert_eq!(seen["create"]["types"], json!(["text"]));
    assert_eq!(seen["count"], json!(prompt_len), "count_tokens counts the prompt the engine runs");
    let events: Vec<&str> = seen["event_types"].as_array().expect("events").iter().filter_map(Value::as_str).collect();
    assert_eq!(events.first(), Some(&"message_start"), "{events:?}");
    assert_eq!(events[events.len() - 2..], ["message_delta", "message_stop"], "{events:?}");
    assert!(events.contains(&"content_block_start") && events.contains(&"content_block_delta"), "{events:?}");

    let stop_params = GenerationParams { stop: vec!["Paris".into()], ..greedy(40) };
    let stopped = generate(&server, conversation[1..].to_vec(), &stop_params);
    assert_eq!(stopped.stop_string.as_deref(), Some("Paris"), "the reference must stop at the sequence: {stopped:?}");
    let got = &seen["stop_sequence"];
    assert_eq!(got["text"], json!(stopped.text), "{got}");
    assert_eq!(got["stop_reason"], json!("stop_sequence"), "{got}");
    assert_eq!(got["stop_sequence"], json!("Paris"), "{got}");

    let structured = &seen["structured"];
    assert_eq!(structured["stop_reason"], json!("end_turn"), "{structured}");
    assert_valid(&structured["schema"], structured["text"].as_str().expect("text"));

    let call = &seen["call"];
    assert_eq!(call["stop_reason"], json!("tool_use"), "{call}");
    assert_eq!(call["name"], json!("get_weather"));
    assert!(call["input"]["city"].is_string(), "{call}");
    assert!(call["id"].as_str().is_some_and(|id| id.starts_with("toolu_")), "{call}");
    let call_events = call["events"].as_array().expect("events");
    assert!(call_events.contains(&json!("input_json")), "the call's input streams as input_json_delta: {call}");

    let round = &seen["round_trip"];
    let answer = round["answer"].as_str().expect("answer");
    let params = GenerationParams { tools: Some(vec![weather_tool(false)]), ..greedy(60) };
    let reference = generate(&server, round_trip_messages(&call["input"], answer, None), &params);
    let usage = &round["usage"];
    let input = usage["input_tokens"].as_u64().unwrap_or(0) + usage["cache_read_input_tokens"].as_u64().unwrap_or(0);
    assert_eq!(input as usize, reference.prompt_token_ids.len(), "the tool_result renders as a tool message: {round}");
    assert_eq!(seen["round_trip_count"], json!(reference.prompt_token_ids.len()));
    assert_eq!(usage["output_tokens"], json!(reference.token_ids.len()), "{round}");
    let blocks = round["blocks"].as_array().expect("blocks");
    let text: String = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
    let calls: Vec<Value> = blocks.iter().filter(|b| b["type"] == "tool_use").cloned().collect();
    assert_same_answer(&text, &calls, &reference);
    let stop = if calls.is_empty() { "end_turn" } else { "tool_use" };
    assert!(round["stop_reason"] == stop || round["stop_reason"] == "max_tokens", "{round}");

    let errors = &seen["errors"];
    for (name, needle) in [("unknown_field", "temprature"), ("image", "image"), ("orphan_tool_result", "tool")] {
        let e = &errors[name];
        assert_eq!(e["status"], json!(400), "{name}: {e}");
        assert_eq!(e["type"], json!("invalid_request_error"), "{name}: {e}");
        assert!(e["message"].as_str().is_some_and(|m| m.contains(needle)), "{name}: {e}");
    }
    assert_eq!(errors["model"], json!({"status": 404, "type": "not_found_error"}));
}

#[test]
fn the_ollama_client_gets_the_engines_answers_on_qwen_coder() {
    let server = qwen_server();
    let seen = run_client(&server, "ollama_check.py", "ollama");
    let model = server.engine.info().model_name.clone();
    let context = server.engine.info().max_model_len;
    assert_eq!(seen["tags"], json!([model]));
    assert_eq!(seen["ps"], json!([context]));
    let show = &seen["show"];
    assert_eq!(show["family"], json!("qwen2"));
    assert_eq!(show["capabilities"], json!(["completion", "tools"]));
    assert_eq!(show["info"]["qwen2.context_length"], json!(context));

    let question = vec![ChatMessage::new("user", "What is the capital of France?")];
    let reference = generate(&server, question.clone(), &greedy(24));
    let done_reason = if reference.token_ids.len() == 24 { "length" } else { "stop" };
    let chat = &seen["chat"];
    assert_eq!(chat["content"], json!(reference.text), "{chat}");
    assert_eq!(chat["done"], json!(true));
    assert_eq!(chat["done_reason"], json!(done_reason));
    assert_eq!(chat["prompt_eval_count"], json!(reference.prompt_token_ids.len()));
    assert_eq!(chat["eval_count"], json!(reference.token_ids.len()));
    // Total, prompt evaluation and generation, each measured (a whole reply too splits its time
    // at the first token), the two parts within the total.
    let durations: Vec<u64> =
        chat["durations"].as_array().expect("durations").iter().filter_map(|d| d.as_u64()).collect();
    assert!(durations.len() == 3 && durations.iter().all(|&n| n > 0), "{chat}");
    assert!(durations[1] + durations[2] <= durations[0], "{chat}");
    let stream = &seen["chat_stream"];
    assert_eq!(stream["content"], json!(reference.text), "{stream}");
    let done: Vec<bool> = stream["done"].as_array().expect("done").iter().map(|d| d == true).collect();
    assert!(done.len() > 2 && done[..done.len() - 1].iter().all(|d| !d) && done[done.len() - 1], "{stream}");
    assert_eq!(stream["done_reason"], json!(done_reason));
    assert_eq!(stream["eval_count"], json!(reference.token_ids.len()));
    assert_eq!(seen["generate"]["response"], json!(reference.text), "generate renders the prompt as a user turn");
    assert_eq!(seen["generate"]["prompt_eval_count"], json!(reference.prompt_token_ids.len()));

    // Logprobs: one entry per token, the greedy token the best of its top 2, the tokens
    // spelling the content.
    let logprobs = &seen["logprobs"];
    let entries = logprobs["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 6, "{logprobs}");
    let mut spelled = String::new();
    for entry in entries {
        let top = entry["top_logprobs"].as_array().expect("top");
        assert_eq!(top.len(), 2, "{entry}");
        let best = top.iter().filter_map(|t| t["logprob"].as_f64()).fold(f64::MIN, f64::max);
        assert!((entry["logprob"].as_f64().expect("logprob") - best).abs() < 1e-5, "{entry}");
        spelled.push_str(entry["token"].as_str().expect("token"));
    }
    assert_eq!(json!(spelled), logprobs["content"]);

    let raw_params = GenerationParams { stop: vec!["\n\n".into()], ..greedy(24) };
    let raw =
        server.engine.generate(vec![Prompt::Text("def fibonacci(n):".into())], &raw_params).expect("raw").remove(0);
    assert_eq!(seen["generate_raw"]["response"], json!(raw.text), "a raw prompt is sent as is");
    assert_eq!(seen["generate_raw"]["eval_count"], json!(raw.token_ids.len()));

    let structured = &seen["structured"];
    assert_eq!(structured["done_reason"], json!("stop"), "{structured}");
    assert_valid(&structured["schema"], structured["content"].as_str().expect("content"));

    let calls = seen["call"].as_array().expect("calls");
    assert!(!calls.is_empty(), "{seen}");
    assert_eq!(calls[0]["name"], json!("get_weather"));
    assert!(calls[0]["arguments"]["city"].is_string(), "{calls:?}");
    let round = &seen["round_trip"];
    let answer = round["answer"].as_str().expect("answer");
    let params = GenerationParams { tools: Some(vec![weather_tool(true)]), ..greedy(60) };
    let reference =
        generate(&server, round_trip_messages(&calls[0]["arguments"], answer, Some("get_weather")), &params);
    assert_eq!(round["prompt_eval_count"], json!(reference.prompt_token_ids.len()), "{round}");
    let calls = round["calls"].as_array().cloned().unwrap_or_default();
    assert_same_answer(round["content"].as_str().expect("content"), &calls, &reference);

    let errors = &seen["errors"];
    for (name, needle) in [("mirostat", "mirostat"), ("unknown_option", "temprature"), ("think", "thinking")] {
        let e = &errors[name];
        assert_eq!(e["status"], json!(400), "{name}: {e}");
        assert!(e["error"].as_str().is_some_and(|m| m.contains(needle)), "{name}: {e}");
    }
    assert_eq!(errors["model"]["status"], json!(404), "{errors}");
}

/// Bad input on the Anthropic and Ollama routes gets each API's own error body (which is what
/// their clients read), with a status from the error's kind; Ollama streams NDJSON unless
/// told not to; its empty prompt is a load, answered at once.
#[test]
fn each_dialect_answers_in_its_own_shapes() {
    let server = TestServer::start(engine_config(server_support::tiny_model("dialects", 512)));
    let model = server.engine.info().model_name.clone();
    let user = json!([{"role": "user", "content": "x"}]);
    let anthropic_cases: Vec<(&str, Vec<u8>, u16, &str, &str)> = vec![
        ("broken JSON", b"{\"model\":".to_vec(), 400, "invalid_request_error", "JSON"),
        ("no max_tokens", json!({"model": model, "messages": user}).to_string().into_bytes(), 400, "invalid_request_error", "max_tokens"),
        (
            "unknown block key",
            json!({"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "text", "text": "x", "bogus": 1}]}]})
                .to_string()
                .into_bytes(),
            400,
            "invalid_request_error",
            "messages[0].content[0]",
        ),
        (
            "tool_use from the user",
            json!({"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]})
                .to_string()
                .into_bytes(),
            400,
            "invalid_request_error",
            "tool_use",
        ),
        (
            "a system role in messages",
            json!({"model": model, "max_tokens": 4, "messages": [{"role": "system", "content": "x"}]}).to_string().into_bytes(),
            400,
            "invalid_request_error",
            "`system`",
        ),
        ("another model", json!({"model": "claude-x", "max_tokens": 4, "messages": user}).to_string().into_bytes(), 404, "not_found_error", "claude-x"),
        ("too large", vec![b' '; 2 << 20], 413, "request_too_large", "too large"),
    ];
    for (what, body, status, kind, needle) in anthropic_cases {
        let r = server.post("/v1/messages", &body);
        assert_eq!(r.status, status, "{what}: {}", r.text());
        let body = r.json();
        assert_eq!(body["type"], json!("error"), "{what}: {body}");
        assert_eq!(body["error"]["type"], json!(kind), "{what}: {body}");
        assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains(needle)), "{what}: {body}");
    }

    let ollama_cases: Vec<(&str, &str, Value, u16, &str)> = vec![
        ("unknown field", "/api/chat", json!({"model": model, "messages": user, "bogus": 1}), 400, "bogus"),
        (
            "a sampler it lacks",
            "/api/chat",
            json!({"model": model, "messages": user, "options": {"typical_p": 0.5}}),
            400,
            "typical_p",
        ),
        (
            "images",
            "/api/chat",
            json!({"model": model, "messages": [{"role": "user", "content": "x", "images": ["AA=="]}]}),
            400,
            "images",
        ),
        (
            "a tool answer with no call",
            "/api/chat",
            json!({"model": model, "messages": [{"role": "tool", "content": "1"}]}),
            400,
            "tool",
        ),
        ("suffix", "/api/generate", json!({"model": model, "prompt": "x", "suffix": "y"}), 400, "suffix"),
        ("format", "/api/generate", json!({"model": model, "prompt": "x", "format": 3}), 400, "format"),
        ("another model", "/api/chat", json!({"model": "llama3", "messages": user}), 404, "llama3"),
    ];
    for (what, route, body, status, needle) in ollama_cases {
        let r = server.post_json(route, &body);
        assert_eq!(r.status, status, "{what}: {}", r.text());
        assert!(r.json()["error"].as_str().is_some_and(|m| m.contains(needle)), "{what}: {}", r.text());
    }

    let r = server.post_json(
        "/api/chat",
        &json!({"model": model, "messages": user, "options": {"num_predict": 5, "temperature": 0}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("content-type").is_some_and(|t| t.contains("application/x-ndjson")), "{}", r.headers);
    let lines: Vec<Value> = r.text().lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    let last = lines.last().expect("lines");
    assert_eq!(last["done"], json!(true), "{last}");
    assert_eq!(last["eval_count"], json!(5), "{last}");
    assert!(lines[..lines.len() - 1].iter().all(|l| l["done"] == json!(false)));
    let whole = server.post_json(
        "/api/chat",
        &json!({"model": model, "messages": user, "stream": false, "options": {"num_predict": 5, "temperature": 0}}),
    );
    let streamed: String = lines.iter().filter_map(|l| l["message"]["content"].as_str()).collect();
    assert_eq!(whole.json()["message"]["content"], json!(streamed), "streamed and whole replies agree");

    let load = server.post_json("/api/generate", &json!({"model": model}));
    assert_eq!(load.json()["done_reason"], json!("load"), "{}", load.text());
    assert_eq!(server.get("/api/version").status, 200);

    // llama-server's slot routes say why they do nothing here.
    for r in [server.get("/slots"), server.post_json("/slots/0?action=save", &json!({"filename": "s.bin"}))] {
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.json()["error"]["message"].as_str().is_some_and(|m| m.contains("no slots")), "{}", r.text());
    }
}
