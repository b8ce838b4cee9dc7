//! Speculative decoding over HTTP (issue 42): a request turns it on or off with `speculative`
//! on every route that generates, is refused with a 400 naming the field where it cannot have
//! it, and `/metrics` counts drafts as vLLM names them.

use entrobatch_testkit::server as server_support;

use std::time::Duration;

use entrobatch::faults::FaultInjection;
use entrobatch::SpeculativeConfig;
use serde_json::json;
use server_support::{engine_config, tiny_model, TestServer};

/// A prompt that repeats itself, so prompt lookup has something to draft from.
fn repetitive() -> String {
    "the cat sat on the mat; ".repeat(6)
}

#[test]
fn speculation_is_asked_for_per_request_and_counted() {
    let mut config = engine_config(tiny_model("spec-http", 512));
    config.speculative =
        Some(SpeculativeConfig { prompt_lookup_min: 1, prompt_lookup_max: 3, ..SpeculativeConfig::ngram() });
    // A step bound by reading the weights, as a CPU decode is: extra rows cost next to nothing,
    // so the scheduler grants drafts whatever this machine's timing noise.
    config.faults = FaultInjection { slow_forward: Some(Duration::from_millis(3)), ..Default::default() };
    let server = TestServer::start(config);
    let body = |speculative: bool| json!({ "prompt": repetitive(), "max_tokens": 32, "temperature": 0, "ignore_eos": true, "speculative": speculative });
    let off = server.post_json("/v1/completions", &body(false));
    assert_eq!(off.status, 200, "{}", off.text());
    assert_eq!(server.metric("entrobatch_spec_decode_num_drafts_total"), 0.0, "off means off");
    let on = server.post_json("/v1/completions", &body(true));
    assert_eq!(on.status, 200, "{}", on.text());
    assert_eq!(on.json()["choices"][0]["text"], off.json()["choices"][0]["text"], "greedy output changed");
    let drafted = server.metric("entrobatch_spec_decode_num_draft_tokens_total");
    let accepted = server.metric("entrobatch_spec_decode_num_accepted_tokens_total");
    assert!(drafted > 0.0 && accepted <= drafted, "{accepted} of {drafted}");
    assert!(server.metric("entrobatch_spec_decode_num_drafts_total") > 0.0);

    // A strategy that cannot speculate is refused only when the request insists.
    let entropix = |speculative: bool| json!({ "prompt": "x", "max_tokens": 2, "decoding": { "strategy": "entropix" }, "speculative": speculative });
    let refused = server.post_json("/v1/completions", &entropix(true));
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(refused.json()["error"]["param"], "speculative", "{}", refused.text());
    assert!(refused.text().contains("entropix"), "{}", refused.text());
    assert_eq!(server.post_json("/v1/completions", &entropix(false)).status, 200);
    let not_bool = server.post_json("/v1/completions", &json!({ "prompt": "x", "speculative": "yes" }));
    assert_eq!(not_bool.status, 400, "{}", not_bool.text());
}

#[test]
fn a_server_without_a_drafter_refuses_a_request_that_asks_for_one() {
    let server = TestServer::start(engine_config(tiny_model("spec-http-off", 512)));
    let chat = json!({ "messages": [{ "role": "user", "content": "hi" }], "max_tokens": 2, "speculative": true });
    let refused = server.post_json("/v1/chat/completions", &chat);
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(refused.json()["error"]["param"], "speculative", "{}", refused.text());
    assert!(refused.text().contains("--speculative-config"), "{}", refused.text());
    let anthropic = json!({
        "model": "spec-http-off", "max_tokens": 2, "speculative": true,
        "messages": [{ "role": "user", "content": "hi" }]
    });
    let refused = server.post_json("/v1/messages", &anthropic);
    assert_eq!(refused.status, 400, "{}", refused.text());
    let fine = json!({ "messages": [{ "role": "user", "content": "hi" }], "max_tokens": 2, "speculative": false });
    assert_eq!(server.post_json("/v1/chat/completions", &fine).status, 200);
}

/// OpenAI's Predicted Outputs on a server with no drafter: the answer is the one given without
/// a prediction, on both routes, whole or streamed, and `usage.completion_tokens_details`
/// counts the prediction's tokens kept and thrown away; a prediction of another shape, or one
/// beside `speculative: false`, is a 400 naming `prediction`.
#[test]
fn a_predicted_output_is_drafted_from_and_counted_in_usage() {
    let mut config = engine_config(tiny_model("spec-http-predicted", 512));
    config.faults = FaultInjection { slow_forward: Some(Duration::from_millis(3)), ..Default::default() };
    let server = TestServer::start(config);
    let chat = |extra: serde_json::Value| {
        let mut body = json!({
            "messages": [{ "role": "user", "content": repetitive() }],
            "max_tokens": 32, "temperature": 0, "ignore_eos": true,
        });
        body.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
        server.post_json("/v1/chat/completions", &body)
    };
    let plain = chat(json!({}));
    assert_eq!(plain.status, 200, "{}", plain.text());
    assert!(plain.json()["usage"].get("completion_tokens_details").is_none(), "{}", plain.text());
    let answer = plain.json()["choices"][0]["message"]["content"].as_str().expect("content").to_string();
    // The answer with an edit in it, as a string and as text parts.
    let cut = answer.char_indices().nth(answer.chars().count() / 2).map_or(0, |(i, _)| i);
    let edited = format!("{} zebra {}", &answer[..cut], &answer[cut..]);
    let parts = json!([{ "type": "text", "text": &answer[..cut] }, { "type": "text", "text": &answer[cut..] }]);
    let (mut accepted, mut rejected) = (0, 0);
    for content in [json!(answer), json!(edited), parts] {
        let r = chat(json!({ "prediction": { "type": "content", "content": content } }));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["choices"][0]["message"]["content"], json!(answer), "greedy output changed");
        let details = &r.json()["usage"]["completion_tokens_details"];
        accepted += details["accepted_prediction_tokens"].as_u64().expect("accepted");
        rejected += details["rejected_prediction_tokens"].as_u64().expect("rejected");
    }
    assert!(accepted > 0 && rejected > 0, "{accepted} kept, {rejected} thrown away");
    assert!(server.metric("entrobatch_spec_decode_num_accepted_tokens_total") >= accepted as f64);

    // Streamed completions: the same text, the counts in the usage chunk.
    let prompt = repetitive();
    let plain = server.post_json(
        "/v1/completions",
        &json!({ "prompt": prompt, "max_tokens": 32, "temperature": 0, "ignore_eos": true }),
    );
    let text = plain.json()["choices"][0]["text"].as_str().expect("text").to_string();
    let streamed = server.post_json(
        "/v1/completions",
        &json!({
            "prompt": prompt, "max_tokens": 32, "temperature": 0, "ignore_eos": true, "stream": true,
            "stream_options": { "include_usage": true }, "prediction": { "type": "content", "content": text },
        }),
    );
    assert_eq!(streamed.status, 200, "{}", streamed.text());
    let chunks: Vec<serde_json::Value> = streamed
        .sse_data()
        .iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).expect("chunk"))
        .collect();
    let got: String = chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect();
    assert_eq!(got, text);
    let usage = &chunks.last().expect("usage chunk")["usage"];
    assert!(
        usage["completion_tokens_details"]["accepted_prediction_tokens"].as_u64().is_some_and(|n| n > 0),
        "{usage}"
    );

    for (prediction, needle) in [
        (json!("just text"), "\"type\": \"content\""),
        (json!({ "type": "content" }), "\"content\""),
        (json!({ "type": "image", "content": "x" }), "\"type\": \"content\""),
        (json!({ "type": "content", "content": [{ "type": "image_url", "image_url": "x" }] }), "each part"),
        (json!({ "type": "content", "content": "x", "extra": 1 }), "extra"),
    ] {
        let r = chat(json!({ "prediction": prediction }));
        assert_eq!(r.status, 400, "{prediction}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], "prediction", "{}", r.text());
        let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
        assert!(message.contains(needle), "{prediction}: {message}");
    }
    let both = chat(json!({ "prediction": { "type": "content", "content": "x" }, "speculative": false }));
    assert_eq!(both.status, 400, "{}", both.text());
    assert_eq!(both.json()["error"]["param"], "prediction", "{}", both.text());
}
