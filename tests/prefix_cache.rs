//! Prefix caching must be invisible in the output: a request whose prompt prefix is already in
//! the cache decodes exactly the tokens it decodes cold, and the cache reports its hits.

use entrobatch_testkit::common;

use std::path::Path;

use common::{tiny_model, varied_prompts};
use entrobatch::model_runner::testing::TinyModelSpec;
use entrobatch::{Engine, EngineConfig, EngineMetrics, GenerationParams, KvDtype, Prompt, SamplingParams};

const N: usize = 24;

fn engine(path: &Path, caching: bool, kv_cache_dtype: Option<KvDtype>) -> Engine {
    let mut config = EngineConfig::new(path);
    config.enable_prefix_caching = caching;
    config.kv_cache_dtype = kv_cache_dtype;
    config.num_blocks = Some(128);
    Engine::start(config).expect("engine")
}

fn greedy(engine: &Engine, prompt: &[u32]) -> Vec<u32> {
    let params = GenerationParams {
        sampling: SamplingParams::greedy(),
        max_tokens: N,
        ignore_eos: true,
        ..GenerationParams::default()
    };
    let out = engine.generate(vec![Prompt::TokenIds(prompt.to_vec())], &params).expect("generate").remove(0);
    assert_eq!(out.error, None);
    out.token_ids
}

/// A shared system-like prefix of several blocks, then three different suffixes; the first
/// request warms the cache, the rest hit it (one of them is the same prompt again: a full hit).
fn prompts(engine: &Engine) -> Vec<Vec<u32>> {
    let params = GenerationParams::default();
    let texts = varied_prompts();
    let prefix = engine.tokenize_prompt(&Prompt::Text(texts.join(" ")), &params).expect("tokenize");
    let prefix = &prefix[..prefix.len().min(100)];
    let mut out = Vec::new();
    for suffix in [&texts[1], &texts[1], &texts[2], &texts[3]] {
        let mut p = prefix.to_vec();
        p.extend(engine.tokenize_prompt(&Prompt::Text(suffix.clone()), &params).expect("tokenize"));
        out.push(p);
    }
    // A prompt of whole blocks, twice: every block is cached, so the last token must still be
    // recomputed to get its logits.
    let whole_blocks = prefix[..96].to_vec();
    out.push(whole_blocks.clone());
    out.push(whole_blocks);
    out
}

fn warm_equals_cold(path: &Path, kv_cache_dtype: Option<KvDtype>) {
    let cold_engine = engine(path, false, kv_cache_dtype);
    let warm_engine = engine(path, true, kv_cache_dtype);
    let prompts = prompts(&cold_engine);
    for (i, prompt) in prompts.iter().enumerate() {
        let cold = greedy(&cold_engine, prompt);
        let warm = greedy(&warm_engine, prompt);
        assert_eq!(warm, cold, "prompt {i}: prefix-cached decode differs from the cold one");
    }
    let m = warm_engine.metrics();
    let hits = EngineMetrics::get(&m.prefix_cache_hits);
    assert!(hits >= 3 * 96, "expected the shared prefix to be served from the cache, got {hits} hit tokens");
    assert_eq!(EngineMetrics::get(&cold_engine.metrics().prefix_cache_hits), 0);
}

#[test]
fn tiny_model_prefix_cache_hits_decode_like_cold() {
    warm_equals_cold(&tiny_model(&TinyModelSpec::llama(), "prefix-cache"), None);
}

#[test]
fn smollm2_prefix_cache_hits_decode_like_cold() {
    warm_equals_cold(&common::smollm2_path(), None);
}

/// A cached block is reused in the dtype it was written in: an 8-bit block read from the cache
/// gives what the cold prefill's own rows gave.
#[test]
fn smollm2_q8_prefix_cache_hits_decode_like_cold() {
    warm_equals_cold(&common::smollm2_path(), Some(KvDtype::Q8));
}
