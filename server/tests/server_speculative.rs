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
