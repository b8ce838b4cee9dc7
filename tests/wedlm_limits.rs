//! WeDLM at the edges: windows clamped by `max_tokens` and by the end of the context (where
//! the reference engine crashes), stop tokens that act only once committed, preemption that
//! drops the window, and models without a mask token.

use entrobatch_testkit::wedlm as wedlm_common;

use entrobatch::model_runner::testing_hf::TinyHfSpec;
use entrobatch::{EngineError, FinishReason, Prompt, Request};
use wedlm_common::*;

#[test]
fn windows_clamp_at_max_tokens_and_at_the_context_end() {
    let dir = checkpoint("clamp", &qwen3_spec());
    let model = load(&dir);
    let positions = model.config().max_position_embeddings;
    // The last request ends exactly at the model's last position: an unclamped W = 16 window
    // would reach 15 positions past the rotary table and fail the whole forward.
    let cases = [
        (prompt(1, 20), wedlm(16, Some(3.3), 0.02), 5),
        (prompt(2, 33), wedlm(4, Some(3.5), 0.0), 13),
        (prompt(3, positions - 12), wedlm(16, Some(3.6), 0.01), 12),
    ];
    let mut config = engine_config(&dir);
    config.max_model_len = Some(positions);
    config.max_num_batched_tokens = 128;
    let engine = start(config);
    let handles: Vec<_> = cases
        .iter()
        .map(|(p, cfg, n)| engine.submit(Request::new(Prompt::TokenIds(p.clone()), wedlm_params(cfg, *n))).unwrap())
        .collect();
    for ((p, cfg, n), handle) in cases.iter().zip(handles) {
        let out = handle.collect_blocking();
        assert_eq!(out.error, None);
        assert_eq!(out.finish_reason, FinishReason::Length);
        let want = dense_wedlm(&model, p, cfg, *n, positions, &[]);
        assert_eq!(out.token_ids, want.ids(), "prompt of {} tokens, max_tokens {n}", p.len());
    }
}

#[test]
fn a_stop_token_in_the_window_acts_only_once_committed() {
    let dir = checkpoint("stop", &qwen3_spec());
    let model = load(&dir);
    let cfg = wedlm(8, Some(3.3), 0.02);
    let max_tokens = 40;
    // Find a prompt whose reference output has a token that was filled while a mask was
    // still to its left, first occurring there: that token becomes the stop token.
    let (prompt, full, stop_at) = (0..40u64)
        .find_map(|seed| {
            let p = prompt(300 + seed, 12);
            let trace = dense_wedlm(&model, &p, &cfg, max_tokens, usize::MAX, &[]);
            let ids = trace.ids();
            let at = trace
                .tokens
                .iter()
                .enumerate()
                .position(|(i, t)| t.committed_at > t.filled_at && i >= 1 && !ids[..i].contains(&t.token))?;
            Some((p, ids, at))
        })
        .expect("some prompt fills a token out of order");
    let stop = full[stop_at];
    let reference = dense_wedlm(&model, &prompt, &cfg, max_tokens, usize::MAX, &[stop]);
    assert_eq!(reference.ids(), full[..=stop_at].to_vec());

    let engine = start(engine_config(&dir));
    let mut params = wedlm_params(&cfg, max_tokens);
    params.stop_token_ids = vec![stop];
    let out = engine.submit(Request::new(Prompt::TokenIds(prompt.clone()), params)).unwrap().collect_blocking();
    assert_eq!(out.finish_reason, FinishReason::Stop);
    // Every token left of the stop token was emitted (it did not act while still in the
    // window) and nothing after it (the rest of its commit is dropped).
    assert_eq!(out.token_ids, full[..=stop_at].to_vec());

    // Without the stop list the same request runs on to max_tokens.
    let unstopped = engine
        .submit(Request::new(Prompt::TokenIds(prompt), wedlm_params(&cfg, max_tokens)))
        .unwrap()
        .collect_blocking();
    assert_eq!(unstopped.token_ids, full);
}

#[test]
fn preemption_drops_the_window_and_resumes_from_committed_tokens() {
    let dir = checkpoint("preempt", &qwen3_spec());
    let model = load(&dir);
    // One token per forward, leftmost first: the window after every commit is all masks, so
    // a restarted window is the window the sequence would have had, and tokens stay exact.
    let exact = wedlm(4, None, 1000.0);
    let parallel = wedlm(6, Some(3.4), 0.02);
    let mut config = engine_config(&dir);
    // 7 blocks of 16 slots hold about a third of the six sequences' 327 tokens.
    config.num_blocks = Some(7);
    config.max_num_batched_tokens = 48;
    let engine = start(config);
    let prompts: Vec<Vec<u32>> = (0..6).map(|i| prompt(500 + i, 18 + 5 * i as usize)).collect();
    let n = 24;
    let requests = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let params = match i % 3 {
                0 => wedlm_params(&exact, n),
                1 => wedlm_params(&parallel, n),
                _ => plain_params(n),
            };
            Request::new(Prompt::TokenIds(p.clone()), params)
        })
        .collect();
    // One submission, so the pool is under pressure from the first step whatever the timing.
    let handles = engine.submit_all(requests).expect("submit");
    let outputs: Vec<_> = handles.into_iter().map(|h| h.collect_blocking()).collect();
    assert!(engine.metrics().preemptions.load(std::sync::atomic::Ordering::Relaxed) > 0, "no preemption happened");
    for (i, (p, out)) in prompts.iter().zip(&outputs).enumerate() {
        assert_eq!(out.error, None, "request {i}");
        assert_eq!(out.token_ids.len(), n, "request {i}");
        match i % 3 {
            0 => assert_eq!(out.token_ids, dense_wedlm(&model, p, &exact, n, usize::MAX, &[]).ids(), "request {i}"),
            1 => {} // a restarted parallel window legitimately decodes differently
            _ => assert_eq!(out.token_ids, dense_greedy(&model, p, n), "request {i}"),
        }
    }
}

#[test]
fn wedlm_on_a_model_without_a_mask_token_is_rejected_at_submit() {
    let spec = TinyHfSpec { mask_token_id: None, wedlm_model_type: false, ..qwen2_spec() };
    let dir = checkpoint("nomask", &spec);
    let engine = start(engine_config(&dir));
    assert_eq!(engine.info().model_config.mask_token_id, None);
    let err = engine
        .submit(Request::new(Prompt::TokenIds(prompt(1, 8)), wedlm_params(&wedlm(4, Some(0.4), 0.02), 8)))
        .err()
        .expect("rejected");
    assert!(
        matches!(&err, EngineError::Strategy(_)) && err.to_string().contains("mask token"),
        "unexpected error: {err}"
    );
    // Bad parameters are request errors too, and plain decoding still works on this model.
    let mask_dir = checkpoint("badparams", &qwen2_spec());
    let masked = start(engine_config(&mask_dir));
    for bad in [wedlm(0, Some(0.4), 0.02), wedlm(4, Some(-1.0), 0.02), wedlm(4, None, f32::NAN), wedlm(64, None, 0.0)] {
        let r = masked.submit(Request::new(Prompt::TokenIds(prompt(1, 8)), wedlm_params(&bad, 8)));
        assert!(matches!(r, Err(EngineError::Strategy(_))), "{bad:?} accepted");
    }
    // A window fills several positions from one forward: no grammar can follow it, so a
    // structured output with WeDLM is refused rather than silently unconstrained.
    let mut constrained = wedlm_params(&wedlm(4, Some(0.4), 0.02), 8);
    constrained.structured = Some(entrobatch::structured::StructuredOutput::JsonObject);
    let err = masked.submit(Request::new(Prompt::TokenIds(prompt(1, 8)), constrained)).err().expect("rejected");
    assert!(matches!(&err, EngineError::Strategy(_)) && err.to_string().contains("one token at a time"), "{err}");
    let out = engine.submit(Request::new(Prompt::TokenIds(prompt(1, 8)), plain_params(6))).unwrap().collect_blocking();
    assert_eq!(out.token_ids.len(), 6);
}

#[test]
fn wedlm_requests_parse_from_json_with_the_reference_defaults() {
    let d: entrobatch::Decoding = serde_json::from_str(r#"{"strategy": "wedlm"}"#).unwrap();
    assert_eq!(d, entrobatch::Decoding::Wedlm(wedlm(16, Some(0.4), 0.02)));
    let d: entrobatch::Decoding = serde_json::from_str(
        r#"{"strategy": "wedlm", "window_size": 4, "entropy_threshold": null, "pos_penalty": 1.0}"#,
    )
    .unwrap();
    assert_eq!(d, entrobatch::Decoding::Wedlm(wedlm(4, None, 1.0)));
}
