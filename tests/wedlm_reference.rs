//! The engine's WeDLM path (paged KV, window rows as scratch rows, batched with prefill
//! chunks, plain decodes and other windows) gives exactly the tokens of a dense, cache-free
//! re-implementation of the WeDLM step, at temperature 0, on generated Qwen3 and Qwen2
//! checkpoints; and the plain requests of the same batch give exactly their solo tokens.

use entrobatch_testkit::wedlm as wedlm_common;

use std::sync::atomic::Ordering;

use entrobatch::model_runner::testing_hf::TinyHfSpec;
use entrobatch::strategy::WedlmConfig;
use entrobatch::{FinishReason, Prompt, Request};
use wedlm_common::*;

const MAX_TOKENS: usize = 28;

fn configs() -> Vec<WedlmConfig> {
    vec![
        wedlm(4, Some(3.3), 0.02),
        wedlm(8, Some(3.0), 0.05),
        wedlm(16, None, 0.0),
        wedlm(6, Some(3.8), 0.3),
        wedlm(5, Some(3.5), 0.0),
    ]
}

fn check_family(name: &str, spec: &TinyHfSpec) {
    let dir = checkpoint(name, spec);
    let model = load(&dir);
    let wedlm_prompts: Vec<Vec<u32>> = (0..configs().len()).map(|i| prompt(100 + i as u64, 9 + 23 * i)).collect();
    let plain_prompts: Vec<Vec<u32>> = (0..3).map(|i| prompt(200 + i, 15 + 30 * i as usize)).collect();

    // The reference first, and it must exercise what the test is about.
    let expected: Vec<_> = configs()
        .iter()
        .zip(&wedlm_prompts)
        .map(|(cfg, p)| dense_wedlm(&model, p, cfg, MAX_TOKENS, usize::MAX, &[]))
        .collect();
    let multi_commits: usize = expected.iter().map(|t| t.commits.iter().filter(|&&c| c >= 2).count()).sum();
    let out_of_order: usize = expected.iter().map(|t| t.out_of_order_fills()).sum();
    let idle: usize = expected.iter().map(|t| t.commits.iter().filter(|&&c| c == 0).count()).sum();
    assert!(multi_commits >= 3, "{name}: reference never commits several tokens at once");
    assert!(out_of_order >= 3, "{name}: reference never fills a mask right of another");
    assert!(idle >= 1, "{name}: reference never has a forward that commits nothing");

    let engine = start(engine_config(&dir));
    let mut handles = Vec::new();
    for (i, (cfg, p)) in configs().iter().zip(&wedlm_prompts).enumerate() {
        handles.push(engine.submit(Request::new(Prompt::TokenIds(p.clone()), wedlm_params(cfg, MAX_TOKENS))).unwrap());
        // Interleave plain requests so windows share forwards with prefills and decodes.
        if let Some(pp) = plain_prompts.get(i) {
            handles.push(engine.submit(Request::new(Prompt::TokenIds(pp.clone()), plain_params(MAX_TOKENS))).unwrap());
        }
    }
    let outputs: Vec<_> = handles.into_iter().map(|h| h.collect_blocking()).collect();
    let mut wedlm_out = Vec::new();
    let mut wedlm_stats = Vec::new();
    let mut plain_out = Vec::new();
    for (i, out) in outputs.into_iter().enumerate() {
        assert_eq!(out.error, None, "{name}: request {i}");
        assert_eq!(out.finish_reason, FinishReason::Length);
        assert_eq!(out.token_ids.len(), MAX_TOKENS);
        // Submission order: w0 p0 w1 p1 w2 p2 w3 w4.
        if i % 2 == 1 && i < 6 {
            assert_eq!(out.strategy_stats, None, "{name}: plain request {i} has no strategy statistics");
            plain_out.push(out.token_ids);
        } else {
            wedlm_out.push(out.token_ids);
            wedlm_stats.push(out.strategy_stats);
        }
    }
    for (i, (got, want)) in wedlm_out.iter().zip(&expected).enumerate() {
        assert_eq!(got, &want.ids(), "{name}: WeDLM request {i} ({:?})", configs()[i]);
    }
    // Per request: the finished event reports the request's own window forwards.
    for (i, (stats, want)) in wedlm_stats.iter().zip(&expected).enumerate() {
        let stats = stats.as_ref().expect("WeDLM requests report their statistics");
        assert_eq!(stats["window_forwards"], want.forwards as u64, "{name}: request {i} window forwards");
        let per = stats["tokens_per_forward"].as_f64().expect("tokens_per_forward");
        let committed = stats["committed_tokens"].as_f64().expect("committed_tokens");
        assert!((per - committed / want.forwards as f64).abs() < 1e-9, "{name}: request {i} tokens per forward");
    }
    let metrics = engine.metrics();
    let forwards = metrics.wedlm.forwards.load(Ordering::Relaxed) as usize;
    assert_eq!(forwards, expected.iter().map(|t| t.forwards).sum::<usize>(), "{name}: window forwards");
    assert!(metrics.wedlm.tokens_per_forward().is_some_and(|t| t > 1.0));

    // Plain requests: their batched tokens are their solo tokens, and greedy AR's.
    for (i, p) in plain_prompts.iter().enumerate() {
        let solo = engine
            .submit(Request::new(Prompt::TokenIds(p.clone()), plain_params(MAX_TOKENS)))
            .unwrap()
            .collect_blocking();
        assert_eq!(plain_out[i], solo.token_ids, "{name}: plain request {i} batched vs solo");
        assert_eq!(plain_out[i], dense_greedy(&model, p, MAX_TOKENS), "{name}: plain request {i} vs dense greedy");
    }
}

#[test]
fn qwen3_engine_matches_dense_reference() {
    check_family("ref-qwen3", &qwen3_spec());
}

#[test]
fn qwen2_engine_matches_dense_reference() {
    check_family("ref-qwen2", &qwen2_spec());
}
