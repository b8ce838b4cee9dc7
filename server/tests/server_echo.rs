//! `/v1/completions` with `echo`, prompt logprobs and `max_tokens: 0` (scoring, as
//! lm-evaluation-harness's loglikelihood tasks send it): teacher-forced scores of a greedy
//! continuation equal the logprobs the sampler reported while generating it.

use entrobatch_testkit::server as server_support;

use serde_json::{json, Value};
use server_support::{engine_config, smollm2_path, TestServer};

fn completion(server: &TestServer, body: Value) -> Value {
    let r = server.post_json("/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn floats(v: &Value) -> Vec<Option<f64>> {
    v.as_array().expect("array").iter().map(Value::as_f64).collect()
}

#[test]
fn echo_scores_the_prompt_as_the_sampler_scored_the_output() {
    let server = TestServer::start(engine_config(smollm2_path()));
    let prompt = "The capital of France is";
    let generated = completion(
        &server,
        json!({ "prompt": prompt, "max_tokens": 6, "temperature": 0, "logprobs": 1, "return_token_ids": true }),
    );
    let choice = &generated["choices"][0];
    let output_ids: Vec<u64> = choice["token_ids"].as_array().expect("ids").iter().filter_map(Value::as_u64).collect();
    let output_lps = floats(&choice["logprobs"]["token_logprobs"]);
    assert_eq!(output_ids.len(), 6);
    let prompt_ids: Vec<u64> = {
        let r = server.post_json("/tokenize", &json!({ "prompt": prompt }));
        r.json()["tokens"].as_array().expect("tokens").iter().filter_map(Value::as_u64).collect()
    };

    // Score prompt + continuation, generating nothing.
    let all: Vec<u64> = prompt_ids.iter().chain(&output_ids).copied().collect();
    let scored = completion(&server, json!({ "prompt": all, "max_tokens": 0, "echo": true, "logprobs": 1 }));
    let choice = &scored["choices"][0];
    assert_eq!(choice["finish_reason"], "length");
    assert_eq!(scored["usage"]["completion_tokens"], 0);
    assert_eq!(
        choice["text"].as_str(),
        Some(format!("{prompt}{}", generated["choices"][0]["text"].as_str().unwrap()).as_str())
    );
    let lps = floats(&choice["logprobs"]["token_logprobs"]);
    assert_eq!(lps.len(), all.len());
    assert_eq!(lps[0], None, "nothing predicts the first token");
    assert!(lps[1..].iter().all(|l| l.is_some_and(|l| l <= 0.0)));
    for (i, (got, want)) in lps[prompt_ids.len()..].iter().zip(&output_lps).enumerate() {
        let (got, want) = (got.expect("scored"), want.expect("sampled"));
        assert!((got - want).abs() < 2e-3, "output token {i}: teacher-forced {got} vs sampled {want}");
    }
    let top = choice["logprobs"]["top_logprobs"].as_array().expect("top");
    assert!(top[0].is_null() && top[1..].iter().all(|m| m.as_object().is_some_and(|m| m.len() == 1)));
    // Greedy output: each generated token was its row's best, so its own logprob is the top one.
    for (i, m) in top[prompt_ids.len()..].iter().enumerate() {
        let best = m.as_object().unwrap().values().next().and_then(Value::as_f64).unwrap();
        assert!((best - lps[prompt_ids.len() + i].unwrap()).abs() < 1e-6, "output token {i}");
    }

    // vLLM's prompt_logprobs: the prompt token first (with its rank), then the row's best.
    let body = json!({ "prompt": prompt, "max_tokens": 1, "prompt_logprobs": 2, "temperature": 0 });
    let with_prompt = completion(&server, body);
    let entries = with_prompt["choices"][0]["prompt_logprobs"].as_array().expect("prompt_logprobs");
    assert_eq!(entries.len(), prompt_ids.len());
    assert!(entries[0].is_null());
    for (pos, entry) in entries.iter().enumerate().skip(1) {
        let map = entry.as_object().expect("map");
        let (first_id, first) = map.iter().next().expect("entry");
        assert_eq!(first_id.parse::<u64>().ok(), Some(prompt_ids[pos]), "position {pos}");
        let rank = first["rank"].as_u64().expect("rank");
        assert!(map.len() == 3 || (map.len() == 2 && rank <= 2), "position {pos}: {map:?}");
        assert!((first["logprob"].as_f64().unwrap() - lps[pos].unwrap()).abs() < 2e-3);
        let best = map.values().filter(|e| e["rank"] == 1).count();
        assert_eq!(best, 1, "position {pos}: one rank-1 entry");
    }
    assert!(with_prompt["choices"][0]["logprobs"].is_null());
}

#[test]
fn a_streamed_echo_sends_the_prompt_first() {
    let server = TestServer::start(engine_config(smollm2_path()));
    let body = json!({ "prompt": "Hello there", "max_tokens": 3, "echo": true, "stream": true, "temperature": 0 });
    let r = server.post_json("/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let chunks: Vec<Value> =
        r.sse_data().iter().filter(|d| *d != "[DONE]").map(|d| serde_json::from_str(d).expect("chunk")).collect();
    assert_eq!(chunks[0]["choices"][0]["text"], "Hello there");
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect();
    let plain = completion(&server, json!({ "prompt": "Hello there", "max_tokens": 3, "temperature": 0 }));
    assert_eq!(text, format!("Hello there{}", plain["choices"][0]["text"].as_str().unwrap()));
}

#[test]
fn scoring_requests_that_cannot_be_served_are_refused_by_field() {
    let server = TestServer::start(engine_config(smollm2_path()));
    let cases = [
        ("/v1/completions", json!({ "prompt": "x", "max_tokens": 0 }), "max_tokens"),
        ("/v1/completions", json!({ "prompt": "x", "prompt_logprobs": 21 }), "prompt_logprobs"),
        ("/v1/completions", json!({ "prompt": "x", "prompt_logprobs": -1 }), "prompt_logprobs"),
        (
            "/v1/chat/completions",
            json!({ "messages": [{ "role": "user", "content": "x" }], "prompt_logprobs": 1 }),
            "prompt_logprobs",
        ),
    ];
    for (route, body, param) in cases {
        let r = server.post_json(route, &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], param, "{body}");
    }
}
