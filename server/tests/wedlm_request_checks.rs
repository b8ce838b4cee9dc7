//! What a WeDLM request may ask for (issue 18, items 3 and 4): a stock Qwen3 checkpoint with
//! the real 151,936-row vocabulary has no mask token (151665 is `<tool_response>` there, not
//! a `[MASK]`), so WeDLM is refused with a typed error, a 400 over HTTP, and the playground
//! does not offer it; the same checkpoint typed as WeDLM takes the reference's 151665
//! fallback (Tencent/WeDLM `wedlm/engine/model_runner.py`). Per-row sampling parameters are
//! honoured by the parallel fill (logit bias, min-p); history penalties are refused.

use entrobatch_testkit::server as server_support;
use entrobatch_testkit::wedlm as wedlm_common;

use entrobatch::model_runner::testing_hf::{TinyHfArch, TinyHfSpec};
use entrobatch::strategy::StrategyError;
use entrobatch::{EngineError, Prompt, Request, SamplingParams};
use serde_json::json;
use server_support::TestServer;
use wedlm_common::{checkpoint, plain_params, prompt, qwen3_spec, start, wedlm, wedlm_params};

/// A Qwen3 layout with the real vocabulary size and a tiny hidden size (the tokenizer stays
/// the tiny one, as real checkpoints pad theirs to the embedding's rows).
fn real_vocab_qwen3(wedlm_model_type: bool) -> TinyHfSpec {
    TinyHfSpec {
        arch: TinyHfArch::Qwen3,
        hidden: 16,
        n_layers: 1,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 8,
        intermediate: 32,
        vocab_size: 151_936,
        mask_token_id: None,
        wedlm_model_type,
        ..TinyHfSpec::qwen3()
    }
}

#[test]
fn a_stock_qwen3_refuses_wedlm_and_the_playground_does_not_offer_it() {
    let dir = checkpoint("stock-qwen3", &real_vocab_qwen3(false));
    let server = TestServer::start(server_support::engine_config(dir));
    assert_eq!(server.engine.info().model_config.vocab_size, 151_936);
    assert_eq!(server.engine.info().model_config.mask_token_id, None, "no 151665 fallback for a stock Qwen3");
    let request = Request::new(Prompt::TokenIds(prompt(1, 8)), wedlm_params(&wedlm(4, Some(0.4), 0.02), 8));
    match server.engine.prepare(request) {
        Err(EngineError::Strategy(StrategyError::NoMaskToken { strategy: "wedlm" })) => {}
        other => panic!("expected NoMaskToken, got {other:?}"),
    }
    let body = json!({
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "decoding": {"strategy": "wedlm"},
    });
    let response = server.post_json("/v1/chat/completions", &body);
    assert_eq!(response.status, 400, "{}", response.text());
    let error = &response.json()["error"];
    assert_eq!(error["param"], "decoding", "{error}");
    assert!(error["message"].as_str().is_some_and(|m| m.contains("no mask token")), "{error}");
    assert_eq!(server.get("/playground/info").json()["wedlm"], false);
    // Plain decoding still works on it.
    let out = server.engine.submit(Request::new(Prompt::TokenIds(prompt(1, 8)), plain_params(3))).unwrap();
    assert_eq!(out.collect_blocking().token_ids.len(), 3);
    drop(server);

    // The same weights typed as WeDLM (`model_type: "wedlm"`, no `mask_token_id`): the
    // reference's fallback id, and the playground offers WeDLM.
    let dir = checkpoint("wedlm-typed-real-vocab", &real_vocab_qwen3(true));
    let server = TestServer::start(server_support::engine_config(dir));
    assert_eq!(server.engine.info().model_config.mask_token_id, Some(151_665));
    assert_eq!(server.get("/playground/info").json()["wedlm"], true);
}

#[test]
fn history_penalties_are_refused_under_wedlm_by_field() {
    let dir = checkpoint("penalties", &qwen3_spec());
    let server = TestServer::start(wedlm_common::engine_config(&dir));
    for (field, value) in [("repetition_penalty", 1.2), ("presence_penalty", 0.5), ("frequency_penalty", -0.5)] {
        let body = json!({
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4,
            "decoding": {"strategy": "wedlm"},
            field: value,
        });
        let response = server.post_json("/v1/chat/completions", &body);
        assert_eq!(response.status, 400, "{field}: {}", response.text());
        assert_eq!(response.json()["error"]["param"], field);
    }
    let mut params = wedlm_params(&wedlm(4, Some(0.4), 0.02), 4);
    params.sampling.no_repeat_ngram_size = 3;
    match server.engine.prepare(Request::new(Prompt::TokenIds(prompt(1, 8)), params)) {
        Err(EngineError::InvalidRequest { field: "no_repeat_ngram_size", .. }) => {}
        other => panic!("expected InvalidRequest, got {other:?}"),
    }
    // The same penalties are fine for plain decoding.
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "presence_penalty": 0.5});
    assert_eq!(server.post_json("/v1/chat/completions", &body).status, 200);
}

#[test]
fn logit_bias_and_min_p_shape_every_mask_row() {
    let dir = checkpoint("per-row", &qwen3_spec());
    let engine = start(wedlm_common::engine_config(&dir));
    let cfg = wedlm(8, Some(0.4), 0.02);
    let run = |sampling: SamplingParams| {
        let params = entrobatch::GenerationParams { sampling, ..wedlm_params(&cfg, 12) };
        let out = engine.submit(Request::new(Prompt::TokenIds(prompt(4, 10)), params)).unwrap().collect_blocking();
        assert_eq!(out.error, None);
        out.token_ids
    };
    let greedy = run(SamplingParams::greedy());
    // A +100 bias on one ordinary token makes it every mask row's argmax (and its entropy ~0,
    // so whole windows fill at once): all twelve tokens are it.
    let biased = run(SamplingParams { logit_bias: vec![(77, 100.0)], ..SamplingParams::greedy() });
    assert!(greedy.iter().any(|&t| t != 77), "the test needs a greedy output that is not all 77");
    assert_eq!(biased, vec![77; 12]);
    // min_p = 1 leaves only each row's most likely token: a T = 1 draw becomes the greedy one.
    let drawn =
        |min_p: f32, seed: u64| run(SamplingParams { temperature: 1.0, min_p, seed: Some(seed), ..Default::default() });
    for seed in 0..3 {
        assert_eq!(drawn(1.0, seed), greedy, "seed {seed}");
    }
    assert!((0..3).any(|seed| drawn(0.0, seed) != greedy), "T = 1 without min_p must differ from greedy");
}
