//! Entropix through the engine: plain requests batched beside entropix ones keep exactly
//! their solo tokens; entropix requests are decided per sequence (same tokens and metrics in
//! a batch as alone); every entropix token carries its metrics and branch; the pause token is
//! looked up in the model's vocabulary and never comes twice in a row.

use entrobatch_testkit::common;

use std::path::Path;

use common::{smollm2_path, tiny_model};
use entrobatch::model_runner::testing::TinyModelSpec;
use entrobatch::sampler::entropix::EntropixConfig;
use entrobatch::strategy::find_pause_token;
use entrobatch::{
    Decoding, Engine, EngineConfig, GeneratedToken, GenerationParams, MatmulMode, Prompt, Request, SamplingParams,
};

fn engine(path: &Path) -> Engine {
    let mut config = EngineConfig::new(path);
    // Quantized: bit-exact rows whatever the batch; a small budget chunks the prefills.
    config.matmul_mode = MatmulMode::Quantized;
    config.max_num_batched_tokens = 40;
    config.max_num_seqs = 8;
    config.enable_prefix_caching = false;
    Engine::start(config).expect("engine")
}

fn plain(n: usize) -> GenerationParams {
    GenerationParams {
        sampling: SamplingParams::greedy(),
        max_tokens: n,
        ignore_eos: true,
        ..GenerationParams::default()
    }
}

fn entropix(n: usize, seed: u64, cfg: EntropixConfig) -> GenerationParams {
    GenerationParams {
        sampling: SamplingParams { seed: Some(seed), ..SamplingParams::default() },
        max_tokens: n,
        ignore_eos: true,
        decoding: Decoding::Entropix(cfg),
        return_metrics: true,
        ..GenerationParams::default()
    }
}

fn prompts(engine: &Engine) -> Vec<Vec<u32>> {
    ["The capital of France is", "Which number is bigger, 9.9 or 9.11?", "Once upon a time", "def add(a, b):"]
        .iter()
        .map(|p| engine.tokenize_prompt(&Prompt::Text(p.to_string()), &plain(1)).expect("tokenize"))
        .collect()
}

fn run_one(engine: &Engine, ids: &[u32], params: &GenerationParams) -> Vec<GeneratedToken> {
    let out =
        engine.submit(Request::new(Prompt::TokenIds(ids.to_vec()), params.clone())).expect("submit").collect_blocking();
    assert_eq!(out.error, None);
    out.tokens
}

fn check_mixed_batch(path: &Path, n: usize, num_prompts: usize) {
    let engine = engine(path);
    let mut prompts = prompts(&engine);
    prompts.truncate(num_prompts);
    let cfg = EntropixConfig::default();
    let plain_alone: Vec<Vec<u32>> =
        prompts.iter().map(|p| run_one(&engine, p, &plain(n)).iter().map(|t| t.token_id).collect()).collect();
    let entropix_alone: Vec<Vec<GeneratedToken>> =
        prompts.iter().enumerate().map(|(i, p)| run_one(&engine, p, &entropix(n, 7 + i as u64, cfg.clone()))).collect();
    // Every prompt twice, once per strategy, all in flight together.
    let handles: Vec<_> = prompts
        .iter()
        .enumerate()
        .flat_map(|(i, p)| [plain(n), entropix(n, 7 + i as u64, cfg.clone())].map(|params| (p.clone(), params)))
        .map(|(p, params)| engine.submit(Request::new(Prompt::TokenIds(p), params)).expect("submit"))
        .collect();
    let outputs: Vec<_> = handles.into_iter().map(|h| h.collect_blocking()).collect();
    for (i, pair) in outputs.chunks(2).enumerate() {
        let (p, e) = (&pair[0], &pair[1]);
        assert_eq!(p.token_ids, plain_alone[i], "prompt {i}: plain tokens changed by entropix neighbours");
        assert!(p.tokens.iter().all(|t| t.metrics.is_none()));
        // Per-sequence metrics: the entropix request decides exactly as it did alone.
        assert_eq!(e.tokens, entropix_alone[i], "prompt {i}: entropix depends on its batch");
        for t in &e.tokens {
            let m = t.metrics.as_ref().expect("entropix token without metrics");
            assert!(m.branch.is_some() && m.attention.is_some(), "{m:?}");
            assert!(m.entropy.is_finite() && m.varentropy >= 0.0);
        }
    }
    engine.shutdown(entrobatch::ShutdownMode::Finish);
}

#[test]
fn tiny_plain_tokens_ignore_entropix_neighbours_and_entropix_is_per_sequence() {
    check_mixed_batch(&tiny_model(&TinyModelSpec::llama(), "entropix-engine-llama"), 24, 4);
}

#[test]
fn smollm2_plain_tokens_ignore_entropix_neighbours_and_entropix_is_per_sequence() {
    check_mixed_batch(&smollm2_path(), 6, 3);
}

/// Thresholds that put every step in HELV (high entropy, low varentropy).
fn always_helv() -> EntropixConfig {
    EntropixConfig { low_ent_thresh: -1.0, high_ent_thresh: -1.0, low_vent_thresh: 1e9, ..EntropixConfig::default() }
}

#[test]
fn pause_token_comes_from_the_vocabulary_and_alternates() {
    for (path, expected) in [(tiny_model(&TinyModelSpec::llama(), "entropix-pause"), "?"), (smollm2_path(), " ...")] {
        let engine = engine(&path);
        let pause = find_pause_token(engine.tokenizer()).expect("a pause token");
        // The tiny byte-level vocabulary has no "..." token: the documented fallback is "?".
        assert_eq!(engine.tokenizer().decode(&[pause], false).unwrap(), expected);
        let prompt = prompts(&engine).remove(0);
        let tokens = run_one(&engine, &prompt, &entropix(8, 3, always_helv()));
        let ids: Vec<u32> = tokens.iter().map(|t| t.token_id).collect();
        let branches: Vec<&str> =
            tokens.iter().map(|t| t.metrics.as_ref().unwrap().branch.as_deref().unwrap()).collect();
        for (i, (&id, b)) in ids.iter().zip(&branches).enumerate() {
            if i % 2 == 0 {
                assert_eq!((id, *b), (pause, "pause"), "step {i}: {ids:?}");
            } else {
                assert_ne!(id, pause, "pause twice in a row at {i}: {ids:?}");
                assert_eq!(*b, "pause_sample");
            }
        }
        // An explicit id overrides the lookup.
        let own = EntropixConfig { pause_token_id: Some(5), ..always_helv() };
        assert_eq!(run_one(&engine, &prompt, &entropix(1, 3, own))[0].token_id, 5);
        engine.shutdown(entrobatch::ShutdownMode::Finish);
    }
}

#[test]
fn invalid_entropix_configs_are_request_errors() {
    let engine = engine(&tiny_model(&TinyModelSpec::llama(), "entropix-invalid"));
    for cfg in [
        EntropixConfig { n_adaptive_samples: 0, ..Default::default() },
        EntropixConfig { top_p: 2.0, ..Default::default() },
        EntropixConfig { pause_token_id: Some(1 << 30), ..Default::default() },
    ] {
        let err = engine.submit(Request::new(Prompt::TokenIds(vec![5, 6, 7]), entropix(4, 1, cfg)));
        assert!(err.is_err());
    }
}
