//! `n` and lists of prompts on `/v1/completions`: choice `p * n + i` is prompt `p`'s copy `i`,
//! which draws from `seed + i` (so it equals a lone request with that seed), streamed choices
//! interleave under their own `index`, and `usage` counts each prompt once.

use entrobatch_testkit::server as server_support;

use std::collections::BTreeMap;

use serde_json::{json, Value};
use server_support::{engine_config, smollm2_path, TestServer};

fn completion(server: &TestServer, body: Value) -> Value {
    let r = server.post_json("/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn texts(body: &Value) -> Vec<String> {
    body["choices"].as_array().expect("choices").iter().map(|c| c["text"].as_str().unwrap().to_string()).collect()
}

#[test]
fn each_copy_of_each_prompt_is_a_seeded_request_of_its_own() {
    let server = TestServer::start(engine_config(smollm2_path()));
    let prompts = ["The capital of France is", "Once upon a time"];
    let sampled = |extra: Value| {
        let mut body = json!({ "max_tokens": 8, "temperature": 1.0, "seed": 40, "ignore_eos": true });
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let batch = completion(&server, sampled(json!({ "prompt": prompts, "n": 3 })));
    let indices: Vec<u64> = batch["choices"].as_array().unwrap().iter().filter_map(|c| c["index"].as_u64()).collect();
    assert_eq!(indices, (0..6).collect::<Vec<_>>());
    let got = texts(&batch);
    for (p, prompt) in prompts.iter().enumerate() {
        for i in 0..3 {
            let alone = completion(&server, sampled(json!({ "prompt": prompt, "seed": 40 + i })));
            assert_eq!(got[p * 3 + i as usize], texts(&alone)[0], "prompt {p} copy {i}");
        }
    }
    assert!(got[0] != got[1] || got[1] != got[2], "three seeds drew the same text: {got:?}");
    let usage = &batch["usage"];
    let prompt_tokens: u64 = prompts
        .iter()
        .map(|p| server.post_json("/tokenize", &json!({ "prompt": p })).json()["count"].as_u64().expect("count"))
        .sum();
    assert_eq!(usage["prompt_tokens"].as_u64(), Some(prompt_tokens), "each prompt counts once");
    assert_eq!(usage["completion_tokens"], 6 * 8);

    // Streamed: chunks of the six choices interleave; each index's text is the same.
    let r = server.post_json(
        "/v1/completions",
        &sampled(json!({ "prompt": prompts, "n": 3, "stream": true, "stream_options": { "include_usage": true } })),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let mut streamed: BTreeMap<u64, String> = BTreeMap::new();
    let mut finished = 0;
    let mut last_usage = Value::Null;
    for data in r.sse_data().iter().filter(|d| *d != "[DONE]") {
        let chunk: Value = serde_json::from_str(data).expect("chunk");
        for c in chunk["choices"].as_array().unwrap() {
            streamed.entry(c["index"].as_u64().unwrap()).or_default().push_str(c["text"].as_str().unwrap());
            finished += usize::from(!c["finish_reason"].is_null());
        }
        if !chunk["usage"].is_null() {
            last_usage = chunk["usage"].clone();
        }
    }
    assert_eq!(streamed.into_values().collect::<Vec<_>>(), got);
    assert_eq!(finished, 6, "one finish_reason per choice");
    assert_eq!(&last_usage, usage);
}

#[test]
fn chat_copies_are_seeded_requests_of_their_own_streamed_or_not() {
    let server = TestServer::start(engine_config(smollm2_path()));
    let body = |extra: Value| {
        let mut body = json!({ "messages": [{ "role": "user", "content": "Name a colour." }],
            "max_tokens": 6, "temperature": 1.0, "seed": 7, "ignore_eos": true });
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let chat = |b: Value| {
        let r = server.post_json("/v1/chat/completions", &b);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    let content = |v: &Value| -> Vec<String> {
        v["choices"].as_array().unwrap().iter().map(|c| c["message"]["content"].as_str().unwrap().to_string()).collect()
    };
    let batch = chat(body(json!({ "n": 3 })));
    let got = content(&batch);
    assert_eq!(got.len(), 3);
    for i in 0..3u64 {
        assert_eq!(got[i as usize], content(&chat(body(json!({ "seed": 7 + i }))))[0], "copy {i}");
        assert_eq!(batch["choices"][i as usize]["index"], i);
    }
    let alone = chat(body(json!({})));
    assert_eq!(batch["usage"]["prompt_tokens"], alone["usage"]["prompt_tokens"], "the prompt counts once");
    assert_eq!(batch["usage"]["completion_tokens"], 18);
    let r = server.post_json("/v1/chat/completions", &body(json!({ "n": 3, "stream": true })));
    let mut streamed: BTreeMap<u64, String> = BTreeMap::new();
    for data in r.sse_data().iter().filter(|d| *d != "[DONE]") {
        let chunk: Value = serde_json::from_str(data).expect("chunk");
        for c in chunk["choices"].as_array().unwrap() {
            let text = c["delta"]["content"].as_str().unwrap_or_default();
            streamed.entry(c["index"].as_u64().unwrap()).or_default().push_str(text);
        }
    }
    assert_eq!(streamed.into_values().collect::<Vec<_>>(), got);
}

#[test]
fn n_and_prompt_lists_out_of_range_are_refused() {
    let server = TestServer::start(engine_config(smollm2_path()));
    let cases = [
        (json!({ "prompt": "x", "n": 0 }), "n"),
        (json!({ "prompt": "x", "n": 65 }), "n"),
        (json!({ "prompt": "x", "n": 2, "best_of": 3 }), "best_of"),
        (json!({ "prompt": [] }), "prompt"),
    ];
    for (body, param) in cases {
        let r = server.post_json("/v1/completions", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], param, "{body}");
    }
    let chat = json!({ "messages": [{ "role": "user", "content": "x" }], "n": 65 });
    let r = server.post_json("/v1/chat/completions", &chat);
    assert_eq!((r.status, r.json()["error"]["param"].clone()), (400, json!("n")), "{}", r.text());
    // best_of equal to n is n.
    let ok = completion(&server, json!({ "prompt": "x", "n": 2, "best_of": 2, "max_tokens": 2 }));
    assert_eq!(ok["choices"].as_array().unwrap().len(), 2);
}

/// A structured output's copies share one compiled grammar, each forked at its start: every
/// choice is valid against the schema (an independent JSON Schema validator) and is the
/// output of a lone request with its seed.
#[test]
fn structured_copies_each_follow_the_schema_as_lone_requests_do() {
    let server = TestServer::start(engine_config(smollm2_path()));
    let schema = json!({ "type": "object",
        "properties": { "answer": { "enum": ["yes", "no"] }, "score": { "type": "integer", "minimum": 0, "maximum": 9 } },
        "required": ["answer", "score"], "additionalProperties": false });
    let body = |seed: u64, n: usize| {
        json!({ "messages": [{ "role": "user", "content": "Is the sky green? Answer in JSON." }],
            "max_tokens": 40, "temperature": 1.0, "seed": seed, "n": n,
            "response_format": { "type": "json_schema", "json_schema": { "name": "verdict", "schema": schema } } })
    };
    let chat = |b: Value| {
        let r = server.post_json("/v1/chat/completions", &b);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    let content = |v: &Value, i: usize| v["choices"][i]["message"]["content"].as_str().unwrap().to_string();
    let validator = jsonschema::validator_for(&schema).expect("valid schema");
    let batch = chat(body(11, 3));
    for i in 0..3 {
        let text = content(&batch, i);
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("copy {i}: {text:?}: {e}"));
        assert!(validator.is_valid(&value), "copy {i}: {value}");
        assert_eq!(batch["choices"][i]["finish_reason"], "stop", "copy {i}");
        assert_eq!(text, content(&chat(body(11 + i as u64, 1)), 0), "copy {i} against a lone request");
    }
}
