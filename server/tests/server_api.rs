//! The HTTP server end to end: the official `openai` Python client against the engine's
//! own output, hostile input, client disconnects, and the queue bound.

use entrobatch_testkit::server as server_support;

use std::io::Read;
use std::process::Command;
use std::time::{Duration, Instant};

use entrobatch::{ChatMessage, GenerationParams, Prompt, Request, SamplingParams};
use serde_json::{json, Value};
use server_support::{engine_config, smollm2_path, tiny_model, TestServer};

fn greedy(max_tokens: usize, ignore_eos: bool) -> GenerationParams {
    GenerationParams { sampling: SamplingParams::greedy(), max_tokens, ignore_eos, ..GenerationParams::default() }
}

/// The `openai` client (installed by `scripts/test`) streams a chat completion and fetches a
/// plain completion; both carry exactly the tokens `Engine::generate` produces for the same
/// prompt and parameters.
#[test]
fn openai_client_gets_the_engines_greedy_tokens() {
    let importable = Command::new("python3").args(["-c", "import openai"]).status().is_ok_and(|s| s.success());
    assert!(importable, "the Python `openai` package is missing: scripts/test installs it (pip install openai)");
    // No prefix cache: the reference run would otherwise reuse the server run's blocks, and
    // a cached prefix changes how the prompt's rows are grouped into forwards (last-bit
    // float differences can flip a near-tie in a 24-token greedy run).
    let mut config = engine_config(smollm2_path());
    config.enable_prefix_caching = false;
    let server = TestServer::start(config);
    let model = server.engine.info().model_name.clone();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/openai_check.py");
    let output = Command::new("python3").args([script, &server.base_url(), &model]).output().expect("run python3");
    assert!(output.status.success(), "openai client failed:\n{}", String::from_utf8_lossy(&output.stderr));
    let seen: Value = serde_json::from_slice(&output.stdout).expect("script prints JSON");
    assert_eq!(seen["models"], json!([model]));
    assert_eq!(seen["retrieved"], json!(model), "models.retrieve");

    let chat = Prompt::Chat(vec![ChatMessage::new("user", "What is the capital of France?")]);
    let reference = server.engine.generate(vec![chat], &greedy(24, false)).expect("generate").remove(0);
    let stream = &seen["chat_stream"];
    assert_eq!(stream["roles"], json!(["assistant"]));
    assert_eq!(stream["token_ids"], json!(reference.token_ids), "streamed chat tokens differ from the engine's");
    assert_eq!(stream["text"], json!(reference.text));
    assert!(!reference.text.is_empty());
    assert_eq!(stream["finish_reason"], json!(reference.finish_reason.as_str()));
    assert_eq!(stream["usage"]["completion_tokens"], json!(reference.token_ids.len()));
    assert_eq!(stream["usage"]["prompt_tokens"], json!(reference.prompt_token_ids.len()));
    let predicted = &seen["predicted"];
    assert_eq!(predicted["text"], json!(reference.text), "a prediction changed the answer");
    assert!(predicted["accepted"].as_u64().is_some_and(|n| n > 0), "the answer as prediction, none kept: {predicted}");
    assert!(predicted["rejected"].as_u64().is_some(), "{predicted}");

    let text = Prompt::Text("The quick brown fox".into());
    let reference = server.engine.generate(vec![text], &greedy(24, true)).expect("generate").remove(0);
    let completion = &seen["completion"];
    assert_eq!(completion["token_ids"], json!(reference.token_ids), "completion tokens differ from the engine's");
    assert_eq!(reference.token_ids.len(), 24);
    assert_eq!(completion["text"], json!(reference.text));
    assert_eq!(completion["finish_reason"], json!("length"));
    assert_eq!(completion["usage"]["total_tokens"], json!(reference.prompt_token_ids.len() + 24));

    // Greedy: each chosen token is the most likely of its top-2, and has two alternatives.
    let logprobs = seen["chat_logprobs"].as_array().expect("logprobs");
    assert!(!logprobs.is_empty());
    let mut text = String::new();
    for entry in logprobs {
        let top = entry["top"].as_array().expect("top");
        assert_eq!(top.len(), 2, "{entry}");
        let best = top.iter().map(|t| t[1].as_f64().unwrap()).fold(f64::MIN, f64::max);
        assert!((entry["logprob"].as_f64().unwrap() - best).abs() < 1e-5, "{entry}");
        text.push_str(entry["token"].as_str().unwrap());
    }
    assert_eq!(json!(text), seen["chat_text"], "logprob tokens spell the message");
    assert_eq!(seen["n2"]["status"], json!(400));
    let multi = seen["n2_completions"].as_array().expect("choices");
    let indices: Vec<u64> = multi.iter().filter_map(|c| c["index"].as_u64()).collect();
    assert_eq!(indices, [0, 1, 2, 3]);
    assert!(multi.iter().all(|c| c["finish_reason"] == "length"));
    assert_eq!(seen["n2_chat"], json!([0, 1]));
}

/// A branching request over HTTP: the response is one completion, its token metrics mark the
/// branch points, and usage reports the tokens decoded by continuations not kept, streamed or not.
#[test]
fn branching_requests_report_their_extra_tokens_in_usage() {
    let server = TestServer::start(engine_config(smollm2_path()));
    let body = |stream: bool| {
        json!({
            "prompt": "The three most surprising facts about octopuses are",
            "max_tokens": 24,
            "ignore_eos": true,
            "return_metrics": true,
            "stream": stream,
            "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null },
            "decoding": {"strategy": "branch", "entropy_threshold": 0.0, "lookahead": 4, "stop_at_newline": false},
        })
    };
    let whole = server.post_json("/v1/completions", &body(false));
    assert_eq!(whole.status, 200, "{}", whole.text());
    let r = whole.json();
    assert_eq!(r["usage"]["completion_tokens"], json!(24));
    let extra = r["usage"]["completion_tokens_details"]["branch_tokens"].as_u64().expect("branch tokens");
    let metrics = r["choices"][0]["token_metrics"].as_array().expect("token metrics");
    let forks: Vec<&Value> = metrics.iter().filter_map(|m| m.get("fork")).collect();
    assert!(!forks.is_empty(), "{metrics:?}");
    let discarded: u64 = forks
        .iter()
        .map(|f| {
            let lengths: Vec<u64> =
                f["lengths"].as_array().expect("lengths").iter().filter_map(Value::as_u64).collect();
            lengths.iter().sum::<u64>() - lengths[f["kept"].as_u64().expect("kept") as usize]
        })
        .sum();
    assert_eq!(extra, discarded, "usage counts what the reports say was thrown away");
    let streamed = server.post_json("/v1/completions", &body(true));
    let last = streamed.sse_data().into_iter().rev().find(|d| d != "[DONE]").expect("usage chunk");
    let usage: Value = serde_json::from_str(&last).expect("JSON chunk");
    assert_eq!(usage["usage"]["completion_tokens_details"]["branch_tokens"], json!(extra), "greedy: the same branches");
}

/// Malformed and hostile requests get the right 4xx with an OpenAI error body, none of them
/// reaches the engine loop, and the server keeps serving.
#[test]
fn hostile_requests_get_4xx_and_the_server_keeps_serving() {
    let server = TestServer::start(engine_config(tiny_model("hostile", 512)));
    let big = format!(r#"{{"prompt": "{}"}}"#, "a".repeat(2 << 20));
    let long_prompt = json!({ "prompt": "hello ".repeat(3000), "max_tokens": 4 }).to_string();
    // (what, route, body, status, error code)
    type Case<'a> = (&'a str, &'a str, Vec<u8>, u16, Option<&'a str>);
    let cases: Vec<Case> = vec![
        ("bad JSON", "/v1/completions", br#"{"prompt": "x","#.to_vec(), 400, Some("invalid_json")),
        ("not an object", "/v1/completions", b"[1, 2]".to_vec(), 400, Some("invalid_json")),
        ("wrong type", "/v1/completions", br#"{"prompt":"x","temperature":"hot"}"#.to_vec(), 400, Some("invalid_json")),
        ("missing prompt", "/v1/completions", br#"{"max_tokens":4}"#.to_vec(), 400, Some("invalid_json")),
        ("negative max_tokens", "/v1/completions", br#"{"prompt":"x","max_tokens":-5}"#.to_vec(), 400, None),
        ("zero max_tokens", "/v1/chat/completions", br#"{"messages":[{"role":"user","content":"x"}],"max_tokens":0}"#.to_vec(), 400, None),
        ("huge max_tokens", "/v1/completions", br#"{"prompt":"x","max_tokens":1000000000000000}"#.to_vec(), 400, Some("context_length_exceeded")),
        ("max_tokens overflow", "/v1/completions", br#"{"prompt":"x","max_tokens":1e300}"#.to_vec(), 400, Some("invalid_json")),
        ("prompt longer than context", "/v1/completions", long_prompt.into_bytes(), 400, Some("context_length_exceeded")),
        ("oversized body", "/v1/completions", big.into_bytes(), 413, Some("body_too_large")),
        ("invalid UTF-8", "/v1/completions", b"{\"prompt\": \"\xff\xfe\"}".to_vec(), 400, Some("invalid_utf8")),
        ("unknown strategy", "/v1/completions", br#"{"prompt":"x","decoding":{"strategy":"beam"}}"#.to_vec(), 400, Some("invalid_decoding")),
        ("strategy without a name", "/v1/completions", br#"{"prompt":"x","decoding":{"guidance_scale":2}}"#.to_vec(), 400, Some("invalid_decoding")),
        ("strategy parameter out of range", "/v1/completions", br#"{"prompt":"x","decoding":{"strategy":"mti","guidance_scale":1e39}}"#.to_vec(), 400, Some("invalid_decoding")),
        ("strategy parameter invalid", "/v1/completions", br#"{"prompt":"x","decoding":{"strategy":"mti","negative_prompt":""}}"#.to_vec(), 400, Some("invalid_decoding")),
        ("strategy parameter of the wrong sign", "/v1/completions", br#"{"prompt":"x","decoding":{"strategy":"wedlm","window_size":-1}}"#.to_vec(), 400, Some("invalid_decoding")),
        ("strategy parameter zero", "/v1/completions", br#"{"prompt":"x","decoding":{"strategy":"wedlm","window_size":0}}"#.to_vec(), 400, Some("invalid_decoding")),
        ("top_p out of range", "/v1/completions", br#"{"prompt":"x","top_p":5}"#.to_vec(), 400, None),
        ("too many logprobs", "/v1/completions", br#"{"prompt":"x","logprobs":50}"#.to_vec(), 400, None),
        ("n = 0", "/v1/completions", br#"{"prompt":"x","n":0}"#.to_vec(), 400, None),
        ("an empty prompt in a list", "/v1/completions", br#"{"prompt":["a",""]}"#.to_vec(), 400, None),
        ("token id outside the vocabulary", "/v1/completions", br#"{"prompt":[99999999]}"#.to_vec(), 400, None),
        ("empty prompt", "/v1/completions", br#"{"prompt":""}"#.to_vec(), 400, None),
        ("empty messages", "/v1/chat/completions", br#"{"messages":[]}"#.to_vec(), 400, None),
        ("messages of the wrong type", "/v1/chat/completions", br#"{"messages":"hi"}"#.to_vec(), 400, Some("invalid_json")),
        ("image content", "/v1/chat/completions", br#"{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#.to_vec(), 400, None),
        ("top_logprobs without logprobs", "/v1/chat/completions", br#"{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}"#.to_vec(), 400, None),
        ("unknown model", "/v1/completions", br#"{"prompt":"x","model":"gpt-9"}"#.to_vec(), 404, Some("model_not_found")),
        ("unknown top-level field", "/v1/completions", br#"{"prompt":"x","foo":{"bar":[1]}}"#.to_vec(), 400, Some("unsupported_field")),
        ("unknown chat field", "/v1/chat/completions", br#"{"messages":[{"role":"user","content":"x"}],"min_tokens":3}"#.to_vec(), 400, Some("unsupported_field")),
        ("misspelled key inside decoding", "/v1/completions", br#"{"prompt":"x","decoding":{"strategy":"mti","tau":1}}"#.to_vec(), 400, Some("invalid_decoding")),
        ("branch parameter out of range", "/v1/completions", br#"{"prompt":"x","decoding":{"strategy":"branch","k":1}}"#.to_vec(), 400, Some("invalid_decoding")),
        ("unknown role", "/v1/chat/completions", br#"{"messages":[{"role":"wizard","content":"x"}]}"#.to_vec(), 400, None),
        ("tool message without a call id", "/v1/chat/completions", br#"{"messages":[{"role":"user","content":"x"},{"role":"tool","content":"42"}]}"#.to_vec(), 400, None),
        ("tool_choice naming no declared tool", "/v1/chat/completions", br#"{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}"#.to_vec(), 400, None),
        ("invalid JSON schema", "/v1/chat/completions", br#"{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"nonsense"}}}}"#.to_vec(), 400, Some("invalid_structured_output")),
        ("invalid regex", "/v1/completions", br#"{"prompt":"x","guided_regex":"("}"#.to_vec(), 400, Some("invalid_structured_output")),
        ("invalid grammar", "/v1/completions", br#"{"prompt":"x","structured_outputs":{"grammar":"start: nope"}}"#.to_vec(), 400, Some("invalid_structured_output")),
        ("unknown response_format type", "/v1/completions", br#"{"prompt":"x","response_format":{"type":"xml"}}"#.to_vec(), 400, None),
        ("unknown structured_outputs key", "/v1/completions", br#"{"prompt":"x","structured_outputs":{"jsn":{}}}"#.to_vec(), 400, None),
        ("two constraints", "/v1/completions", br#"{"prompt":"x","response_format":{"type":"json_object"},"guided_regex":"a+"}"#.to_vec(), 400, None),
        ("constraint with ignore_eos", "/v1/completions", br#"{"prompt":"x","guided_choice":["a","b"],"ignore_eos":true}"#.to_vec(), 400, None),
    ];
    for (name, path, body, status, code) in &cases {
        let response = server.post(path, body);
        assert_eq!(response.status, *status, "{name}: {}", response.text());
        let error = &response.json()["error"];
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{name}: {error}");
        assert!(error["type"].is_string(), "{name}: {error}");
        assert!(error.get("param").is_some() && error.get("code").is_some(), "{name}: {error}");
        if let Some(code) = code {
            assert_eq!(error["code"], json!(code), "{name}");
        }
    }
    // Nothing above reached the engine loop.
    let metrics = server.engine.metrics();
    let finished: u64 = metrics.requests_finished.iter().map(|c| c.load(std::sync::atomic::Ordering::SeqCst)).sum();
    assert_eq!(finished, 0, "a rejected request reached the engine");
    assert_eq!(server.engine.in_flight(), 0);

    // A JSON body sent as anything but JSON is refused (415): a cross-origin page can post
    // text/plain without a CORS preflight.
    for content_type in ["text/plain", "application/x-www-form-urlencoded"] {
        let r = server_support::request_typed(server.addr, "/v1/completions", content_type, br#"{"prompt":"x"}"#);
        assert_eq!(r.status, 415, "{content_type}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], json!("unsupported_media_type"));
    }
    // Fields that cannot change the output (`user`) are accepted; the server still serves
    // both endpoints.
    let ok = server.post_json(
        "/v1/completions",
        &json!({ "prompt": "hello", "max_tokens": 3, "ignore_eos": true, "user": "u1", "metadata": { "k": "v" } }),
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.json()["usage"]["completion_tokens"], json!(3));
    let chat = server.post_json(
        "/v1/chat/completions",
        &json!({ "messages": [{ "role": "user", "content": "hi" }], "max_tokens": 2, "decoding": { "strategy": "plain" }, "return_metrics": true }),
    );
    assert_eq!(chat.status, 200, "{}", chat.text());
    let metrics = &chat.json()["choices"][0]["token_metrics"];
    assert!(metrics.as_array().is_some_and(|m| !m.is_empty() && m[0]["entropy"].as_f64().unwrap() >= 0.0), "{metrics}");
    assert_eq!(server.get("/health").status, 200);
    assert_eq!(server.get("/nope").status, 404);
    assert!(server.metric("entrobatch_http_requests_total{route=\"/v1/completions\",status=\"400\"}") >= 15.0);
    assert_eq!(server.metric("entrobatch_http_requests_total{route=\"/v1/completions\",status=\"413\"}"), 1.0);
}

/// A client that hangs up mid-stream aborts its request: its KV blocks are freed and the
/// abort counter moves, long before the request could have finished.
#[test]
fn client_disconnect_mid_stream_frees_blocks() {
    let server = TestServer::start(engine_config(smollm2_path()));
    let body = json!({ "prompt": "Tell me a long story.", "max_tokens": 1200, "ignore_eos": true, "stream": true });
    let mut stream = server_support::send(server.addr, "POST", "/v1/completions", body.to_string().as_bytes());
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while seen.matches("data: ").count() < 4 {
        let n = stream.read(&mut buf).expect("read stream");
        assert!(n > 0, "stream ended early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.contains("text/event-stream"), "{seen}");
    assert!(server.metric("entrobatch_kv_blocks_used") > 0.0);
    assert_eq!(server.metric("entrobatch_num_requests_in_flight"), 1.0);
    let hung_up = Instant::now();
    drop(stream);
    server.wait_for_metric("entrobatch_requests_total{outcome=\"abort\"}", 1.0, Duration::from_secs(60));
    server.wait_for_metric("entrobatch_kv_blocks_used", 0.0, Duration::from_secs(10));
    assert_eq!(server.metric("entrobatch_num_requests_in_flight"), 0.0);
    assert_eq!(server.metric("entrobatch_requests_total{outcome=\"length\"}"), 0.0);
    assert!(server.metric("entrobatch_generation_tokens_total") < 1200.0);
    assert!(hung_up.elapsed() < Duration::from_secs(60));
    // The server still serves.
    let ok = server.post_json("/v1/completions", &json!({ "prompt": "Hi", "max_tokens": 2 }));
    assert_eq!(ok.status, 200, "{}", ok.text());
}

/// `submit` counts a request in flight at once (not at the next step's gauges), so the
/// queue bound holds exactly: beyond it the server answers 429 at once.
#[test]
fn full_queue_gets_429_and_the_count_is_exact() {
    let mut config = engine_config(tiny_model("queue", 4096));
    config.max_queued_requests = Some(2);
    let server = TestServer::start(config);
    let long = greedy(4000, true);
    let a = server.engine.submit(Request::new(Prompt::Text("a".into()), long.clone())).expect("first");
    assert_eq!(server.engine.in_flight(), 1, "counted on submit, before any step");
    let b = server.engine.submit(Request::new(Prompt::Text("b".into()), long)).expect("second");
    assert_eq!(server.engine.in_flight(), 2);
    let started = Instant::now();
    let refused = server.post_json("/v1/completions", &json!({ "prompt": "c", "max_tokens": 2 }));
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert_eq!(refused.json()["error"]["code"], json!("queue_full"));
    assert!(refused.headers.to_ascii_lowercase().contains("retry-after: 1"), "{}", refused.headers);
    assert!(started.elapsed() < Duration::from_secs(5), "429 must come at once");
    assert_eq!(server.metric("entrobatch_requests_total{outcome=\"rejected\"}"), 1.0);
    // Finished means released: once a handle has seen its end, the slot is free.
    a.abort();
    let out = a.collect_blocking();
    assert_eq!(out.finish_reason, entrobatch::FinishReason::Abort);
    assert_eq!(server.engine.in_flight(), 1, "released before the Finished event is sent");
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.engine.in_flight() > 0 {
        assert!(Instant::now() < deadline, "the dropped handle was never aborted");
        std::thread::sleep(Duration::from_millis(10));
    }
    let ok = server.post_json("/v1/completions", &json!({ "prompt": "c", "max_tokens": 2 }));
    assert_eq!(ok.status, 200, "{}", ok.text());
}

/// vLLM's `/tokenize` and `/detokenize`: the same ids the engine uses for a prompt (text, or
/// messages through the chat template), and back; `GET /v1/models/{id}` 404s another id.
#[test]
fn tokenize_and_detokenize_agree_with_the_engine() {
    let server = TestServer::start(engine_config(smollm2_path()));
    let engine = &server.engine;
    let text = "The quick brown fox";
    let r = server.post_json("/tokenize", &json!({ "prompt": text, "return_token_strs": true }));
    assert_eq!(r.status, 200, "{}", r.text());
    let expected = engine.tokenize_prompt(&Prompt::Text(text.into()), &GenerationParams::default()).expect("tokenize");
    assert_eq!(r.json()["tokens"], json!(expected));
    assert_eq!(r.json()["count"], json!(expected.len()));
    assert_eq!(r.json()["token_strs"].as_array().map(Vec::len), Some(expected.len()));
    let chat = [ChatMessage::new("user", "Hello there")];
    let r = server.post_json("/tokenize", &json!({ "messages": [{ "role": "user", "content": "Hello there" }] }));
    let expected = engine.tokenize_prompt(&Prompt::Chat(chat.to_vec()), &GenerationParams::default()).expect("chat");
    assert_eq!(r.json()["tokens"], json!(expected), "{}", r.text());
    let r = server.post_json("/detokenize", &json!({ "tokens": expected }));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["prompt"].as_str().is_some_and(|p| p.contains("Hello there")), "{}", r.text());
    assert_eq!(r.json()["content"], r.json()["prompt"], "llama-server's name for the text");
    // llama-server's request shape: `content`, special tokens only with `add_special`, and
    // `with_pieces` pairing every id with its text.
    for special in [false, true] {
        let r = server.post_json("/tokenize", &json!({ "content": text, "add_special": special, "with_pieces": true }));
        assert_eq!(r.status, 200, "{}", r.text());
        let expected = engine.tokenizer().encode(text, special).expect("encode");
        let pieces = r.json()["tokens"].as_array().cloned().unwrap_or_default();
        let ids: Vec<u64> = pieces.iter().map(|p| p["id"].as_u64().expect("id")).collect();
        assert_eq!(json!(ids), json!(expected), "add_special {special}");
        let joined: String = pieces.iter().map(|p| p["piece"].as_str().expect("piece")).collect();
        let decoded = engine.tokenizer().decode(&expected, false).expect("decode");
        assert_eq!(joined, decoded);
    }
    let r = server.post_json("/tokenize", &json!({ "content": text }));
    assert_eq!(r.json()["tokens"], json!(engine.tokenizer().encode(text, false).expect("encode")), "{}", r.text());
    for (path, body) in [
        ("/tokenize", json!({ "prompt": "x", "content": "x" })),
        ("/tokenize", json!({ "prompt": "x", "add_special": true })),
        ("/tokenize", json!({ "prompt": "x", "messages": [] })),
        ("/tokenize", json!({ "prompt": "x", "surprise": 1 })),
        ("/detokenize", json!({ "tokens": [u32::MAX] })),
    ] {
        assert_eq!(server.post_json(path, &body).status, 400, "{path} {body}");
    }
    assert_eq!(server.get(&format!("/v1/models/{}", engine.info().model_name)).status, 200);
    assert_eq!(server.get("/v1/models/gpt-9").status, 404);
}

/// A key no part of the request has is refused with its path, at every level of the typed
/// parts, instead of being dropped: a misspelled constraint must not turn into free text.
#[test]
fn unknown_keys_inside_typed_parts_are_refused_by_their_path() {
    let server = TestServer::start(engine_config(tiny_model("unknown-keys", 512)));
    let user = json!([{ "role": "user", "content": "x" }]);
    let tool = |extra: Value| {
        let mut function = json!({ "name": "f", "parameters": { "type": "object" } });
        let mut tool = json!({ "type": "function" });
        match extra {
            Value::Object(m) if m.contains_key("in_function") => function["bogus"] = json!(1),
            _ => tool["bogus"] = json!(1),
        }
        tool["function"] = function;
        json!([tool])
    };
    // (what, route, body, words the message must hold)
    let cases: Vec<(&str, &str, Value, &str)> = vec![
        (
            "json_object",
            "/v1/completions",
            json!({ "prompt": "x", "response_format": { "type": "json_object", "bogus": 1 } }),
            "response_format.bogus",
        ),
        (
            "text",
            "/v1/completions",
            json!({ "prompt": "x", "response_format": { "type": "text", "schema": {} } }),
            "response_format.schema",
        ),
        (
            "json_schema beside its object",
            "/v1/completions",
            json!({ "prompt": "x", "response_format": { "type": "json_schema", "json_schema": { "schema": {} }, "strict": true } }),
            "response_format.strict",
        ),
        (
            "inside json_schema",
            "/v1/completions",
            json!({ "prompt": "x", "response_format": { "type": "json_schema", "json_schema": { "schema": {}, "bogus": 1 } } }),
            "response_format.json_schema.bogus",
        ),
        (
            "stream_options",
            "/v1/completions",
            json!({ "prompt": "x", "stream": true, "stream_options": { "include_usage": true, "bogus": 1 } }),
            "stream_options.bogus",
        ),
        ("a tool", "/v1/chat/completions", json!({ "messages": user, "tools": tool(json!({})) }), "tools[0].bogus"),
        (
            "a tool's function",
            "/v1/chat/completions",
            json!({ "messages": user, "tools": tool(json!({ "in_function": true })) }),
            "tools[0].function.bogus",
        ),
        ("llama-server's slot", "/v1/completions", json!({ "prompt": "x", "id_slot": 0 }), "no slots"),
        (
            "llama-server's prompt cache",
            "/v1/chat/completions",
            json!({ "messages": user, "cache_prompt": true }),
            "always cached",
        ),
        (
            "a GBNF grammar that does not parse",
            "/v1/completions",
            json!({ "prompt": "x", "grammar": "root ::= answer\nanswer ::= \"yes\" |\n  (\"no\"" }),
            "GBNF line 3, column 8: expected `)`",
        ),
        (
            "a text part",
            "/v1/chat/completions",
            json!({ "messages": [{ "role": "user", "content": [{ "type": "text", "text": "x", "bogus": 1 }] }] }),
            "messages[0].content[0].bogus",
        ),
    ];
    for (what, route, body, words) in cases {
        let response = server.post_json(route, &body);
        assert_eq!(response.status, 400, "{what}: {}", response.text());
        let error = &response.json()["error"];
        let said = format!("{} {}", error["message"], error["param"]);
        assert!(said.contains(words), "{what}: the error should name `{words}`: {error}");
    }
    assert_eq!(server.engine.in_flight(), 0);

    // A greedy completion constrained by `form`: its text, once it stopped on its own.
    let constrained = |what: &str, prompt: &str, form: Value| -> String {
        let mut body = json!({ "prompt": prompt, "max_tokens": 40, "temperature": 0 });
        body.as_object_mut().unwrap().extend(form.as_object().unwrap().clone());
        let response = server.post_json("/v1/completions", &body);
        assert_eq!(response.status, 200, "{what}: {}", response.text());
        let choice = &response.json()["choices"][0];
        assert_eq!(choice["finish_reason"], json!("stop"), "{what}: {choice}");
        choice["text"].as_str().unwrap().to_string()
    };

    // llama-server's two ways of sending a schema constrain the answer as OpenAI's does.
    let schema = json!({
        "type": "object",
        "properties": { "answer": { "enum": ["yes", "no"] } },
        "required": ["answer"],
        "additionalProperties": false
    });
    let forms = [
        ("schema inside json_object", json!({ "response_format": { "type": "json_object", "schema": schema } })),
        ("top-level json_schema", json!({ "json_schema": schema })),
    ];
    for (what, form) in forms {
        let text = constrained(what, "Answer:", form);
        let answer: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {text:?} is not JSON: {e}"));
        let keys: Vec<&String> = answer.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["answer"], "{what}: {answer}");
        assert!(answer["answer"] == json!("yes") || answer["answer"] == json!("no"), "{what}: {answer}");
    }

    // GBNF, as llama-server's `grammar` and as vLLM's `structured_outputs.grammar` (told
    // from Lark by its `::=`), constrains the answer to the grammar's language.
    let gbnf = "root ::= \"Answer: \" verdict \".\"\nverdict ::= (\"yes\" | \"no\") (\", \" [a-z]{1,8}){0,2}\n";
    let language = regex::Regex::new(r"^Answer: (yes|no)(, [a-z]{1,8}){0,2}\.$").unwrap();
    let forms = [
        ("llama-server's grammar", json!({ "grammar": gbnf })),
        ("vLLM's grammar", json!({ "structured_outputs": { "grammar": gbnf } })),
    ];
    for (what, form) in forms {
        let text = constrained(what, "Is the sky blue?", form);
        assert!(language.is_match(&text), "{what}: {text:?} is outside the grammar");
    }

    // A keyword no grammar can enforce: refused under OpenAI's `strict`, else decoded under
    // the rest of the schema and checked after, the verdict on the choice, whole or streamed.
    let schema =
        json!({ "type": "array", "items": { "enum": ["x", "y"] }, "minItems": 2, "maxItems": 2, "uniqueItems": true });
    let format = |strict: bool| json!({ "type": "json_schema", "json_schema": { "name": "pair", "schema": schema, "strict": strict } });
    let response = server.post_json("/v1/completions", &json!({ "prompt": "x", "response_format": format(true) }));
    assert_eq!(response.status, 400, "{}", response.text());
    assert!(response.text().contains("uniqueItems"), "{}", response.text());
    // The same rule for a function's `strict` when the choice forces a call.
    let required_call = |strict: bool| {
        let parameters = json!({ "type": "object", "properties": { "pair": schema }, "required": ["pair"], "additionalProperties": false });
        let tools =
            json!([{ "type": "function", "function": { "name": "pick", "strict": strict, "parameters": parameters } }]);
        json!({ "messages": [{ "role": "user", "content": "Pick two letters." }], "max_tokens": 120, "tools": tools, "tool_choice": "required", "parallel_tool_calls": false })
    };
    let response = server.post_json("/v1/chat/completions", &required_call(true));
    assert_eq!(response.status, 400, "{}", response.text());
    assert!(response.text().contains("uniqueItems"), "{}", response.text());
    let response = server.post_json("/v1/chat/completions", &required_call(false));
    assert_eq!(response.status, 200, "{}", response.text());
    let choice = &response.json()["choices"][0];
    assert_eq!(choice["message"]["tool_calls"][0]["function"]["name"], json!("pick"), "{choice}");
    assert!(choice["schema_errors"].is_array(), "the best-effort call is checked: {choice}");
    let checks_before = server.metric("entrobatch_structured_output_schema_checks_total");
    let mut verdicts = std::collections::HashSet::new();
    for seed in 0..6 {
        for stream in [false, true] {
            let body = json!({ "prompt": "Two letters:", "max_tokens": 20, "seed": seed, "temperature": 5, "stream": stream, "response_format": format(false) });
            let response = server.post_json("/v1/completions", &body);
            assert_eq!(response.status, 200, "{}", response.text());
            let (text, errors) = if stream {
                let chunks: Vec<Value> = response
                    .sse_data()
                    .iter()
                    .filter(|d| *d != "[DONE]")
                    .map(|d| serde_json::from_str(d).unwrap())
                    .collect();
                let text: String = chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect();
                let last =
                    chunks.iter().rev().find(|c| !c["choices"][0]["finish_reason"].is_null()).expect("closing chunk");
                (text, last["choices"][0]["schema_errors"].clone())
            } else {
                let choice = response.json()["choices"][0].clone();
                (choice["text"].as_str().unwrap().to_string(), choice["schema_errors"].clone())
            };
            let items: Vec<String> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            let unique = items[0] != items[1];
            let errors = errors.as_array().unwrap_or_else(|| panic!("no schema_errors for {text:?}")).clone();
            assert_eq!(errors.is_empty(), unique, "{text:?}: {errors:?}");
            verdicts.insert(unique);
        }
    }
    assert_eq!(verdicts.len(), 2, "the sampled pairs should include a repeat and a unique one");
    assert_eq!(server.metric("entrobatch_structured_output_schema_checks_total") - checks_before, 12.0);

    // Anthropic's `output_config.format` and Ollama's `format` carry the same verdict, on the
    // message (or its closing `message_delta`) and on the `done` line.
    let user = json!([{ "role": "user", "content": "Two letters:" }]);
    for stream in [false, true] {
        let body = json!({ "model": "", "max_tokens": 20, "temperature": 1, "stream": stream, "messages": user,
            "output_config": { "format": { "type": "json_schema", "schema": schema } } });
        let response = server.post_json("/v1/messages", &body);
        assert_eq!(response.status, 200, "{}", response.text());
        let (text, errors) = if stream {
            let events: Vec<Value> = response.sse_data().iter().map(|d| serde_json::from_str(d).unwrap()).collect();
            let text: String = events.iter().filter_map(|e| e["delta"]["text"].as_str()).collect();
            let delta = events.iter().find(|e| e["type"] == "message_delta").expect("message_delta");
            (text, delta["schema_errors"].clone())
        } else {
            let message = response.json();
            (message["content"][0]["text"].as_str().unwrap().to_string(), message["schema_errors"].clone())
        };
        assert_pair_verdict("anthropic", &text, &errors);

        let body = json!({ "model": "", "stream": stream, "messages": user, "format": schema,
            "options": { "temperature": 5, "seed": 3, "num_predict": 20 } });
        let response = server.post_json("/api/chat", &body);
        assert_eq!(response.status, 200, "{}", response.text());
        let lines: Vec<Value> = response.text().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let text: String = lines.iter().filter_map(|l| l["message"]["content"].as_str()).collect();
        let done = lines.last().expect("a done line");
        assert_eq!(done["done"], json!(true), "{done}");
        assert_pair_verdict("ollama", &text, &done["schema_errors"]);
    }
}

/// `schema_errors` is a list, empty exactly when the pair's two items differ.
fn assert_pair_verdict(what: &str, text: &str, errors: &Value) {
    let items: Vec<String> = serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: {text:?}: {e}"));
    let errors = errors.as_array().unwrap_or_else(|| panic!("{what}: no schema_errors for {text:?}"));
    assert_eq!(errors.is_empty(), items[0] != items[1], "{what}: {text:?}: {errors:?}");
}
