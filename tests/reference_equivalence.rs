//! The engine's greedy tokens, with many sequences chunked, preempted and batched together,
//! equal candle-transformers' own models run on each prompt alone.

mod common;

use std::path::Path;

use common::{reference_greedy, tiny_model, varied_prompts, RefArch};
use entrobatch::model_runner::testing::TinyModelSpec;
use entrobatch::{
    Engine, EngineConfig, EngineMetrics, Event, GenerationParams, MatmulMode, Prompt, Request,
    SamplingParams,
};

const NEW_TOKENS: usize = 36;

/// Small budget and pool: prompts arrive in chunks and sequences get preempted.
fn pressured_config(path: &Path, matmul_mode: MatmulMode, num_blocks: usize) -> EngineConfig {
    let mut config = EngineConfig::new(path);
    config.block_size = 16;
    config.num_blocks = Some(num_blocks);
    config.max_num_batched_tokens = 48;
    config.max_num_seqs = 8;
    config.matmul_mode = matmul_mode;
    config
}

fn greedy(n: usize) -> GenerationParams {
    GenerationParams {
        sampling: SamplingParams::greedy(),
        max_tokens: n,
        ignore_eos: true,
        ..GenerationParams::default()
    }
}

/// Half the prompts first; the rest once the first request is streaming (staggered arrival).
fn run_staggered(engine: &Engine, prompts: &[Vec<u32>], n: usize) -> Vec<Vec<u32>> {
    let submit = |ids: &Vec<u32>| {
        engine.submit(Request::new(Prompt::TokenIds(ids.clone()), greedy(n))).expect("submit")
    };
    let half = prompts.len() / 2;
    let mut first: Vec<_> = prompts[..half].iter().map(submit).collect();
    let mut leading = Vec::new();
    match first[0].next_blocking() {
        Some(Event::Tokens { tokens, .. }) => leading.extend(tokens.iter().map(|t| t.token_id)),
        other => panic!("expected a token event, got {other:?}"),
    }
    let rest: Vec<_> = prompts[half..].iter().map(submit).collect();
    let mut outputs = Vec::new();
    for (i, handle) in first.drain(..).chain(rest).enumerate() {
        let out = handle.collect_blocking();
        assert_eq!(out.error, None);
        let mut ids = if i == 0 { leading.clone() } else { Vec::new() };
        ids.extend(out.token_ids);
        outputs.push(ids);
    }
    outputs
}

fn assert_equivalent(path: &Path, arch: RefArch, mode: MatmulMode, num_blocks: usize) {
    let engine = Engine::start(pressured_config(path, mode, num_blocks)).expect("engine");
    let prompts: Vec<Vec<u32>> = varied_prompts()
        .iter()
        .map(|p| {
            let mut ids = engine.tokenize_prompt(&Prompt::Text(p.clone()), &greedy(1)).expect("tokenize");
            // Byte-level tiny vocabularies make long prompts; keep every request well inside the pool.
            ids.truncate(200);
            ids
        })
        .collect();
    let lengths: Vec<usize> = prompts.iter().map(Vec::len).collect();
    assert!(lengths.iter().max().unwrap() > &100, "need a long prompt to force chunking: {lengths:?}");
    let got = run_staggered(&engine, &prompts, NEW_TOKENS);
    let metrics = engine.metrics().clone();
    let expected = reference_greedy(path, arch, &prompts, NEW_TOKENS);
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g, e, "prompt {i} ({} tokens) diverges from the reference", lengths[i]);
    }
    assert!(
        EngineMetrics::get(&metrics.preemptions) > 0,
        "the pool of {num_blocks} blocks was meant to force preemption"
    );
    engine.shutdown(entrobatch::ShutdownMode::Finish);
    assert_eq!(EngineMetrics::get(&metrics.kv_blocks_used), 0, "blocks leaked");
}

#[test]
fn smollm2_quantized_path_matches_candle_quantized_llama() {
    assert_equivalent(&common::smollm2_path(), RefArch::Llama, MatmulMode::Quantized, 20);
}

#[test]
fn smollm2_dense_path_matches_candle_quantized_llama() {
    assert_equivalent(&common::smollm2_path(), RefArch::Llama, MatmulMode::default(), 20);
}

#[test]
fn tiny_llama_matches_candle_quantized_llama() {
    let path = tiny_model(&TinyModelSpec::llama(), "ref-llama");
    assert_equivalent(&path, RefArch::Llama, MatmulMode::Quantized, 20);
}

#[test]
fn tiny_qwen2_matches_candle_quantized_qwen2() {
    let path = tiny_model(&TinyModelSpec::qwen2(), "ref-qwen2");
    assert_equivalent(&path, RefArch::Qwen2, MatmulMode::Quantized, 20);
}

#[test]
fn qwen_coder_matches_candle_quantized_qwen2_when_present() {
    let Some(path) = common::qwen_coder_path() else {
        eprintln!("skipped: Qwen2.5-Coder not fetched (scripts/fetch-model qwen2.5-coder-0.5b)");
        return;
    };
    assert_equivalent(&path, RefArch::Qwen2, MatmulMode::default(), 20);
}
