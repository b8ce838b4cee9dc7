//! Entropy branching through the whole engine on SmolLM2: the kept continuation of every
//! branch point is exactly what plain greedy decoding gives from the same tokens (so a forked
//! sequence reads its parent's shared and copied KV blocks right), branching requests beside
//! plain ones leave the plain ones' tokens untouched, the report says what was tried, and every
//! block comes back, after a finish and after an abort mid-branch.

use entrobatch_testkit::common;

use entrobatch::strategy::BranchConfig;
use entrobatch::{
    BranchReport, Decoding, Engine, EngineConfig, EngineMetrics, GenerationParams, Prompt, SamplingParams,
};

fn start(num_blocks: usize, max_num_seqs: usize) -> Engine {
    let mut config = EngineConfig::new(common::smollm2_path());
    config.num_blocks = Some(num_blocks);
    config.max_num_seqs = max_num_seqs;
    config.max_num_batched_tokens = 64;
    Engine::start(config).expect("engine")
}

fn params(decoding: Decoding, max_tokens: usize) -> GenerationParams {
    GenerationParams {
        sampling: SamplingParams::greedy(),
        max_tokens,
        ignore_eos: true,
        decoding,
        return_metrics: true,
        ..GenerationParams::default()
    }
}

/// Branches at every token it may (threshold 0), lookahead 5, no line boundary.
fn always(k: usize) -> Decoding {
    Decoding::Branch(BranchConfig {
        k,
        entropy_threshold: 0.0,
        lookahead: 5,
        stop_at_newline: false,
        max_branch_points: 4,
        ..BranchConfig::default()
    })
}

const PROMPTS: [&str; 3] = [
    "The three most surprising facts about octopuses are",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Question: Tom has 3 apples and buys 5 more. How many apples does he have?\nAnswer:",
];

fn greedy_continuation(engine: &Engine, tokens: Vec<u32>, n: usize) -> Vec<u32> {
    let out = engine.generate(vec![Prompt::TokenIds(tokens)], &params(Decoding::Plain, n)).expect("generate");
    out[0].token_ids.clone()
}

#[test]
fn kept_continuations_are_greedy_from_their_candidate_and_plain_requests_are_untouched() {
    let engine = start(256, 16);
    let prompts: Vec<Prompt> = PROMPTS.iter().map(|p| Prompt::Text(p.to_string())).collect();
    let plain = engine.generate(prompts.clone(), &params(Decoding::Plain, 24)).expect("plain");

    // Branching requests and plain ones in one batch.
    let mut mixed_prompts = prompts.clone();
    mixed_prompts.extend(prompts.iter().cloned());
    let handles: Vec<_> = mixed_prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let decoding = if i < PROMPTS.len() { always(3) } else { Decoding::Plain };
            engine.submit(entrobatch::Request::new(p.clone(), params(decoding, 24))).expect("submit")
        })
        .collect();
    let outputs: Vec<_> = handles.into_iter().map(|h| h.collect_blocking()).collect();
    for (i, out) in outputs.iter().enumerate().skip(PROMPTS.len()) {
        assert_eq!(out.token_ids, plain[i - PROMPTS.len()].token_ids, "plain request {i} beside branching ones");
    }

    let mut kept_other = 0;
    for (i, out) in outputs.iter().take(PROMPTS.len()).enumerate() {
        assert_eq!(out.error, None);
        assert_eq!(out.token_ids.len(), 24);
        let stats = out.strategy_stats.as_ref().expect("branch stats");
        assert_eq!(stats["branch_points"], 4, "prompt {i}: {stats}");
        let reports: Vec<(usize, &BranchReport)> = out
            .tokens
            .iter()
            .enumerate()
            .filter_map(|(j, t)| t.metrics.as_ref().and_then(|m| m.fork.as_ref()).map(|r| (j, r)))
            .collect();
        assert_eq!(reports.len(), 4, "prompt {i}: one report per branch point");
        let mut extra = 0;
        for &(j, report) in &reports {
            assert_eq!(report.tried, 3);
            let best = report.scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(report.scores[report.kept], best, "prompt {i} token {j}: kept the best score");
            extra += report.lengths.iter().sum::<usize>() - report.lengths[report.kept];
            kept_other += usize::from(report.kept != 0);
            // After its candidate, the kept continuation is greedy: recompute it from scratch.
            let len = report.lengths[report.kept];
            let mut prefix = out.prompt_token_ids.clone();
            prefix.extend_from_slice(&out.token_ids[..=j]);
            let expected = greedy_continuation(&engine, prefix, len - 1);
            assert_eq!(out.token_ids[j + 1..j + len], expected[..], "prompt {i}: continuation after token {j}");
        }
        assert_eq!(stats["branch_extra_tokens"], extra, "prompt {i}");
        // Before the first branch point the output is the plain one.
        assert_eq!(out.token_ids[..reports[0].0], plain[i].token_ids[..reports[0].0]);
    }
    assert!(kept_other > 0, "some branch kept a continuation other than the greedy one");
    let metrics = engine.metrics();
    assert_eq!(EngineMetrics::get(&metrics.kv_blocks_used), 0, "every block back");
}

#[test]
fn a_branch_whose_candidates_all_end_at_once_settles_without_a_forward() {
    // A one-token lookahead ends every continuation with its candidate: the branch settles as
    // it starts, and the request (alone in the engine) goes on.
    let engine = start(256, 8);
    let decoding =
        Decoding::Branch(BranchConfig { k: 3, entropy_threshold: 0.0, lookahead: 1, ..BranchConfig::default() });
    let out = engine.generate(vec![Prompt::Text(PROMPTS[0].to_string())], &params(decoding, 12)).expect("generate");
    assert_eq!((out[0].token_ids.len(), out[0].error.as_deref()), (12, None));
    let stats = out[0].strategy_stats.as_ref().expect("stats");
    assert_eq!(stats["branch_points"], 8, "{stats}");
    assert_eq!(stats["branch_extra_tokens"], 16, "two other one-token continuations per point");
}

#[test]
fn no_spare_slot_means_plain_decoding_and_an_abort_mid_branch_frees_everything() {
    // One sequence slot: no room to fork, so the output is plain greedy's.
    let engine = start(256, 1);
    let prompt = vec![Prompt::Text(PROMPTS[0].to_string())];
    let plain = engine.generate(prompt.clone(), &params(Decoding::Plain, 16)).expect("plain");
    let crowded = engine.generate(prompt.clone(), &params(always(3), 16)).expect("branch");
    assert_eq!(crowded[0].token_ids, plain[0].token_ids);
    let stats = crowded[0].strategy_stats.as_ref().expect("stats");
    assert_eq!((stats["branch_points"].as_u64(), stats["branch_no_room"].as_u64()), (Some(0), Some(16)));
    drop(engine);

    let engine = start(256, 8);
    let handle = engine.submit(entrobatch::Request::new(prompt[0].clone(), params(always(4), 200))).expect("submit");
    std::thread::sleep(std::time::Duration::from_millis(300));
    handle.abort();
    let out = handle.collect_blocking();
    assert_eq!(out.finish_reason, entrobatch::FinishReason::Abort);
    let metrics = engine.metrics();
    for _ in 0..100 {
        if EngineMetrics::get(&metrics.kv_blocks_used) == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(EngineMetrics::get(&metrics.kv_blocks_used), 0, "an abort mid-branch frees every continuation");
}
