//! `MatmulMode::Int8` end to end: greedy tokens, with many sequences chunked, preempted and
//! batched together, stay close to candle-transformers' own models run on each prompt alone
//! (near-tie rule of `assert_close_greedy`: int8 activations round differently from candle's
//! kernels), and a request's log-probabilities are bit-identical alone or inside a batch, with
//! the exact f32 KV cache and with the f16 one.

use entrobatch_testkit::common;

use std::path::Path;

use common::{
    assert_close_greedy, greedy_with_logprobs, pressured_config, reference_greedy_with_top, tiny_model,
    varied_prompt_ids, RefArch,
};
use entrobatch::model_runner::testing::TinyModelSpec;
use entrobatch::{Engine, EngineConfig, GenerationParams, KvDtype, MatmulMode, Prompt, Request};

const NEW_TOKENS: usize = 24;
const TOP: usize = 5;

type Steps = Vec<(u32, Vec<(u32, f32)>)>;

/// 24 blocks: long prompts arrive in chunks and sequences get preempted. The exact f32 KV
/// cache, so the kernels are compared alone (the f16 default has its own test below).
fn int8_config(path: &Path, max_num_seqs: usize) -> EngineConfig {
    EngineConfig { kv_cache_dtype: Some(KvDtype::F32), ..pressured_config(path, MatmulMode::Int8, 24, max_num_seqs) }
}

fn greedy(n: usize) -> GenerationParams {
    greedy_with_logprobs(n, TOP)
}

/// Submits all prompts at once and collects each one's (token, top log-probs) steps.
fn run_all(engine: &Engine, prompts: &[Vec<u32>]) -> Vec<Steps> {
    let handles: Vec<_> = prompts
        .iter()
        .map(|ids| engine.submit(Request::new(Prompt::TokenIds(ids.clone()), greedy(NEW_TOKENS))).expect("submit"))
        .collect();
    handles
        .into_iter()
        .map(|h| {
            let out = h.collect_blocking();
            assert_eq!(out.error, None);
            out.tokens
                .into_iter()
                .map(|t| (t.token_id, t.logprob.map(|l| l.top_logprobs).unwrap_or_default()))
                .collect()
        })
        .collect()
}

fn assert_close_to_reference(path: &Path, arch: RefArch) {
    let engine = Engine::start(int8_config(path, 8)).expect("engine");
    let prompts = varied_prompt_ids(&engine);
    assert!(prompts.iter().any(|p| p.len() > 100), "need a long prompt to force chunking");
    let got = run_all(&engine, &prompts);
    engine.shutdown(entrobatch::ShutdownMode::Finish);
    let expected = reference_greedy_with_top(path, arch, &prompts, NEW_TOKENS, TOP);
    let mut agreeing = 0;
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g.len(), NEW_TOKENS, "prompt {i}: wrong number of tokens");
        agreeing += assert_close_greedy(&format!("prompt {i}"), g, e).unwrap_or(NEW_TOKENS);
    }
    let total = NEW_TOKENS * prompts.len();
    // Guards against a kernel that is wrong but lands on near-ties: most tokens must agree.
    assert!(agreeing * 2 >= total, "only {agreeing} of {total} tokens agree before near-tie divergences");
}

#[test]
fn smollm2_int8_is_close_to_candle_quantized_llama() {
    assert_close_to_reference(&common::smollm2_path(), RefArch::Llama);
}

#[test]
fn tiny_llama_int8_is_close_to_candle_quantized_llama() {
    assert_close_to_reference(&tiny_model(&TinyModelSpec::llama(), "int8-llama"), RefArch::Llama);
}

#[test]
fn tiny_qwen2_int8_is_close_to_candle_quantized_qwen2() {
    assert_close_to_reference(&tiny_model(&TinyModelSpec::qwen2(), "int8-qwen2"), RefArch::Qwen2);
}

#[test]
fn qwen_coder_int8_is_close_to_candle_quantized_qwen2_when_present() {
    let Some(path) = common::qwen_coder_path() else {
        eprintln!("skipped: Qwen2.5-Coder not fetched (scripts/fetch-model qwen2.5-coder-0.5b)");
        return;
    };
    assert_close_to_reference(&path, RefArch::Qwen2);
}

/// The promise of the mode: a request decodes to the same bits alone and inside a batch of
/// other requests (here also chunked and preempted differently).
#[test]
fn smollm2_int8_request_is_bit_identical_alone_and_batched() {
    let path = common::smollm2_path();
    let engine = Engine::start(int8_config(&path, 8)).expect("engine");
    let prompts = varied_prompt_ids(&engine);
    let batched = run_all(&engine, &prompts);
    engine.shutdown(entrobatch::ShutdownMode::Finish);
    let engine = Engine::start(int8_config(&path, 1)).expect("engine");
    for (i, prompt) in prompts.iter().enumerate().take(3) {
        let alone = run_all(&engine, std::slice::from_ref(prompt));
        let bits = |s: &Steps| {
            s.iter()
                .map(|(t, top)| (*t, top.iter().map(|(id, lp)| (*id, lp.to_bits())).collect::<Vec<_>>()))
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(&alone[0]), bits(&batched[i]), "prompt {i}: batch changed the result");
    }
    engine.shutdown(entrobatch::ShutdownMode::Finish);
}

/// The f16 and q8 KV caches keep the int8 mode's promise (a request decodes to the same bits
/// alone and batched, chunked and preempted differently) and stay close to the exact f32
/// cache: the same greedy tokens until a near-tie (where each side's token is in the other's
/// top 5), for at least half of the tokens, the bar used against candle above (measured for
/// f16: 103 of 192; int8 activations turn the cache's rounding into flipped near-ties, as they
/// do candle's kernels').
#[test]
fn smollm2_f16_kv_cache_is_batch_invariant_and_close_to_f32() {
    narrow_cache_is_batch_invariant_and_close_to_f32(KvDtype::F16);
}

#[test]
fn smollm2_q8_kv_cache_is_batch_invariant_and_close_to_f32() {
    narrow_cache_is_batch_invariant_and_close_to_f32(KvDtype::Q8);
}

fn narrow_cache_is_batch_invariant_and_close_to_f32(dtype: KvDtype) {
    let path = common::smollm2_path();
    let narrow_config = |max_num_seqs| EngineConfig { kv_cache_dtype: Some(dtype), ..int8_config(&path, max_num_seqs) };
    let engine = Engine::start(int8_config(&path, 8)).expect("engine");
    let prompts = varied_prompt_ids(&engine);
    let exact = run_all(&engine, &prompts);
    engine.shutdown(entrobatch::ShutdownMode::Finish);
    let engine = Engine::start(narrow_config(8)).expect("engine");
    let batched = run_all(&engine, &prompts);
    engine.shutdown(entrobatch::ShutdownMode::Finish);

    let engine = Engine::start(narrow_config(1)).expect("engine");
    let bits = |s: &Steps| {
        s.iter()
            .map(|(t, top)| (*t, top.iter().map(|(id, lp)| (*id, lp.to_bits())).collect::<Vec<_>>()))
            .collect::<Vec<_>>()
    };
    for (i, prompt) in prompts.iter().enumerate().take(2) {
        let alone = run_all(&engine, std::slice::from_ref(prompt));
        assert_eq!(bits(&alone[0]), bits(&batched[i]), "prompt {i}: batch changed the {dtype:?}-cache result");
    }
    engine.shutdown(entrobatch::ShutdownMode::Finish);

    let mut agreeing = 0;
    for (i, (g, e)) in batched.iter().zip(&exact).enumerate() {
        assert_ne!(bits(g), bits(e), "prompt {i}: the {dtype:?} cache changed nothing; is it in use?");
        agreeing += assert_close_greedy(&format!("{dtype:?} cache, prompt {i}"), g, e).unwrap_or(NEW_TOKENS);
    }
    let total = NEW_TOKENS * prompts.len();
    eprintln!("{dtype:?}: {agreeing} of {total} tokens agree with the f32 cache before near-ties");
    assert!(agreeing * 2 >= total, "only {agreeing} of {total} tokens agree with the f32 cache before near-ties");
}
