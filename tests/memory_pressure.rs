//! Memory pressure: 50 concurrent requests against a KV pool that holds only a handful of
//! them. Everything must complete through preemption and recomputation, with exactly the
//! greedy tokens a pool large enough for all of them gives (the default numerics are
//! batch-invariant, so recomputing a preempted sequence must not change a single token),
//! and every block must be free at the end.

use entrobatch_testkit::common;

use std::path::Path;

use common::tiny_model;
use entrobatch::model_runner::testing::TinyModelSpec;
use entrobatch::{
    Engine, EngineConfig, EngineMetrics, FinishReason, GenerationOutput, GenerationParams, Prompt, Request,
    SamplingParams, ShutdownMode,
};

const REQUESTS: u32 = 50;
const MAX_TOKENS: usize = 16;
const BLOCK_SIZE: usize = 4;
/// The longest request needs (16 + 16) / 4 = 8 blocks: 40 blocks hold about five at once.
const SMALL_POOL: usize = 40;
const LARGE_POOL: usize = 1024;

/// Varied lengths so sequences finish and get preempted at different steps.
fn prompt(i: u32) -> Vec<u32> {
    (0..4 + i % 13).map(|j| (i * 31 + j * 7) % 300 + 3).collect()
}

struct Run {
    outputs: Vec<GenerationOutput>,
    preemptions: u64,
    blocks_used_at_end: u64,
    in_flight_at_end: u64,
}

fn run_all(path: &Path, num_blocks: usize) -> Run {
    let mut config = EngineConfig::new(path);
    config.block_size = BLOCK_SIZE;
    config.num_blocks = Some(num_blocks);
    // A small budget also chunks the prefills that preempted sequences recompute.
    config.max_num_batched_tokens = 32;
    let engine = Engine::start(config).expect("engine");
    let params = GenerationParams {
        sampling: SamplingParams::greedy(),
        max_tokens: MAX_TOKENS,
        ignore_eos: true,
        ..GenerationParams::default()
    };
    // One submission: the first step sees all 50 requests, however slow this thread is.
    let requests = (0..REQUESTS).map(|i| Request::new(Prompt::TokenIds(prompt(i)), params.clone())).collect();
    let handles = engine.submit_all(requests).expect("submit");
    let outputs = handles.into_iter().map(|h| h.collect_blocking()).collect();
    let metrics = engine.metrics().clone();
    let in_flight_at_end = engine.in_flight();
    engine.shutdown(ShutdownMode::Finish);
    Run {
        outputs,
        preemptions: EngineMetrics::get(&metrics.preemptions),
        blocks_used_at_end: EngineMetrics::get(&metrics.kv_blocks_used),
        in_flight_at_end,
    }
}

#[test]
fn fifty_requests_complete_through_preemption_with_unchanged_greedy_tokens() {
    let path = tiny_model(&TinyModelSpec::llama(), "memory-pressure");
    let small = run_all(&path, SMALL_POOL);
    let large = run_all(&path, LARGE_POOL);

    eprintln!("{SMALL_POOL}-block pool: {} preemptions", small.preemptions);
    assert!(small.preemptions > 0, "a {SMALL_POOL}-block pool was meant to force preemption");
    assert_eq!(large.preemptions, 0, "the large pool holds every request at once");
    for run in [&small, &large] {
        assert_eq!(run.blocks_used_at_end, 0, "blocks leaked");
        assert_eq!(run.in_flight_at_end, 0, "requests lost");
        assert_eq!(run.outputs.len(), REQUESTS as usize);
    }
    for (i, (s, l)) in small.outputs.iter().zip(&large.outputs).enumerate() {
        assert_eq!((s.finish_reason, &s.error), (FinishReason::Length, &None), "request {i}");
        assert_eq!(s.token_ids.len(), MAX_TOKENS, "request {i}");
        assert_eq!(s.token_ids, l.token_ids, "request {i}: preemption changed its greedy tokens");
    }
    // Different prompts must not all collapse to one output, or the comparison proves little.
    let distinct: std::collections::HashSet<_> = small.outputs.iter().map(|o| &o.token_ids).collect();
    assert!(distinct.len() > REQUESTS as usize / 2, "only {} distinct outputs", distinct.len());
}
