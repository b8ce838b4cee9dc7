//! Prompt log-probabilities (`GenerationParams::prompt_logprobs`) against candle-transformers'
//! own model fed one token at a time: every prompt position scored once, in order, through
//! chunked prefill, preemption and a warm prefix cache, and scoring-only requests
//! (`max_tokens` 0) that end after their prompt.

use entrobatch_testkit::common;

use common::{pressured_config, reference_logits_per_position, tiny_model, varied_prompt_ids, RefArch};
use entrobatch::model_runner::testing::TinyModelSpec;
use entrobatch::{Engine, EngineConfig, FinishReason, GenerationParams, MatmulMode, Prompt, Request, SamplingParams};

const TOP: usize = 3;
/// Tokens the requests that also generate ask for: enough growth to force preemptions.
const GENERATED: usize = 150;

fn scoring(max_tokens: usize) -> GenerationParams {
    GenerationParams {
        sampling: SamplingParams::greedy(),
        max_tokens,
        ignore_eos: true,
        prompt_logprobs: Some(TOP),
        ..GenerationParams::default()
    }
}

fn log_softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = max + row.iter().map(|&l| (l as f64 - max).exp()).sum::<f64>().ln();
    row.iter().map(|&l| l as f64 - lse).collect()
}

#[test]
fn prompt_logprobs_match_a_token_by_token_reference() {
    let path = tiny_model(&TinyModelSpec::llama(), "prompt-logprobs");
    // Chunks of at most 128 rows and a pool small enough that the six requests preempt each
    // other; f32 KV and candle's own attention ops, so the only differences are in rounding.
    let mut config: EngineConfig = pressured_config(&path, MatmulMode::Quantized, 20, 6);
    config.kv_cache_dtype = Some(entrobatch::KvDtype::F32);
    config.attention_kernel = entrobatch::AttentionKernel::CandleMirror;
    config.enable_prefix_caching = true;
    let engine = Engine::start(config).expect("engine");
    // 96-token prompts: three that generate 150 tokens each outgrow the 20-block pool together.
    let prompts: Vec<Vec<u32>> = varied_prompt_ids(&engine)
        .into_iter()
        .map(|mut p| {
            p.truncate(96);
            p
        })
        .collect();
    // Warm the prefix cache with the first prompt: a scoring request must still compute it all.
    let warm = engine.generate(vec![Prompt::TokenIds(prompts[0].clone())], &scoring_free(2)).expect("warm");
    assert_eq!(warm[0].error, None);
    let handles: Vec<_> = prompts
        .iter()
        .take(6)
        .enumerate()
        .map(|(i, p)| {
            let params = scoring(if i % 2 == 0 { 0 } else { GENERATED });
            engine.submit(Request::new(Prompt::TokenIds(p.clone()), params)).expect("submit")
        })
        .collect();
    for (i, handle) in handles.into_iter().enumerate() {
        let out = handle.collect_blocking();
        assert_eq!(out.error, None, "request {i}");
        let prompt = &prompts[i];
        if i % 2 == 0 {
            assert_eq!((out.finish_reason, out.token_ids.len()), (FinishReason::Length, 0), "scoring only");
        } else {
            assert_eq!(out.token_ids.len(), GENERATED);
        }
        assert_eq!(out.cached_tokens, 0, "request {i} was served from the prefix cache");
        let scored: Vec<u32> = out.prompt_logprobs.iter().map(|p| p.token_id).collect();
        assert_eq!(scored, prompt[1..], "request {i}: every prompt position after the first, once, in order");
        let reference = reference_logits_per_position(&path, RefArch::Llama, prompt);
        for (pos, got) in out.prompt_logprobs.iter().enumerate() {
            let lp = log_softmax(&reference[pos]);
            let want = lp[got.token_id as usize];
            assert!(
                (got.logprob as f64 - want).abs() < 2e-3,
                "request {i} position {}: {} vs {want}",
                pos + 1,
                got.logprob
            );
            // Rank: how many tokens beat it, give or take the ones within rounding of it.
            let beaten_surely = lp.iter().filter(|&&l| l > want + 1e-4).count() as u32;
            let beaten_maybe = lp.iter().filter(|&&l| l > want - 1e-4).count() as u32 - 1;
            assert!(
                (beaten_surely..=beaten_maybe.max(beaten_surely)).contains(&(got.rank - 1)),
                "request {i} position {}: rank {} vs {}",
                pos + 1,
                got.rank,
                beaten_surely + 1
            );
            assert_eq!(got.top_logprobs.len(), TOP);
            let best = got.top_logprobs[0];
            assert!((best.1 as f64 - lp[best.0 as usize]).abs() < 2e-3);
            assert!(lp.iter().all(|&l| l <= best.1 as f64 + 2e-3), "the top alternative is the row's best");
        }
    }
    assert!(
        entrobatch::EngineMetrics::get(&engine.metrics().preemptions) > 0,
        "the pool was meant to force preemptions (recompute must not score a position twice)"
    );
}

/// Plain greedy generation (nothing scored), for warming the cache.
fn scoring_free(max_tokens: usize) -> GenerationParams {
    GenerationParams { prompt_logprobs: None, ..scoring(max_tokens) }
}

#[test]
fn max_tokens_zero_needs_prompt_logprobs_and_the_count_is_bounded() {
    let path = tiny_model(&TinyModelSpec::llama(), "prompt-logprobs-limits");
    let engine = Engine::start(EngineConfig::new(&path)).expect("engine");
    let prompt = Prompt::TokenIds(vec![1, 2, 3]);
    let err = engine.prepare(Request::new(prompt.clone(), scoring_free(0))).expect_err("nothing to do");
    assert!(matches!(err, entrobatch::EngineError::InvalidRequest { field: "max_tokens", .. }), "{err:?}");
    let too_many = GenerationParams { prompt_logprobs: Some(21), ..scoring(0) };
    let err = engine.prepare(Request::new(prompt, too_many)).expect_err("over the limit");
    assert!(matches!(err, entrobatch::EngineError::InvalidRequest { field: "prompt_logprobs", .. }), "{err:?}");
}

/// Each token of a sequence forced one request at a time (`logit_bias` +100 on it, `logprobs`
/// reports the raw distribution's value) against one scoring pass over the whole sequence.
fn forced_logprobs_agree(path: &std::path::Path, config: EngineConfig, tokens: &[u32], tolerance: f64) {
    let engine = Engine::start(config).expect("engine");
    let scored =
        engine.generate(vec![Prompt::TokenIds(tokens.to_vec())], &scoring(0)).expect("score").remove(0).prompt_logprobs;
    assert_eq!(scored.len(), tokens.len() - 1);
    for (pos, want) in scored.iter().enumerate().map(|(i, s)| (i + 1, s)) {
        let params = GenerationParams {
            sampling: SamplingParams {
                logprobs: Some(0),
                logit_bias: vec![(tokens[pos], 100.0)],
                ..SamplingParams::greedy()
            },
            max_tokens: 1,
            ignore_eos: true,
            ..GenerationParams::default()
        };
        let out = engine.generate(vec![Prompt::TokenIds(tokens[..pos].to_vec())], &params).expect("forced").remove(0);
        assert_eq!(out.token_ids, [tokens[pos]], "{}: the bias forces the token", path.display());
        let forced = out.tokens[0].logprob.as_ref().expect("logprob").logprob;
        assert!(
            (f64::from(forced) - f64::from(want.logprob)).abs() <= tolerance,
            "{} position {pos}: forced {forced} vs scored {}",
            path.display(),
            want.logprob
        );
    }
}

#[test]
fn prompt_logprobs_equal_forced_decoding_on_a_generated_model_and_smollm2() {
    let path = tiny_model(&TinyModelSpec::llama(), "prompt-logprobs-forced");
    let tokens: Vec<u32> = (0..40u32).map(|i| (i * 37 + 11) % 200 + 3).collect();
    forced_logprobs_agree(&path, EngineConfig::new(&path), &tokens, 1e-4);
    let smollm2 = common::smollm2_path();
    let engine = Engine::start(EngineConfig::new(&smollm2)).expect("engine");
    let text = "The quick brown fox jumps over the lazy dog, and then it runs into the forest to hide.";
    let tokens = engine.tokenize_prompt(&Prompt::Text(text.into()), &GenerationParams::default()).expect("tokenize");
    drop(engine);
    forced_logprobs_agree(&smollm2, EngineConfig::new(&smollm2), &tokens, 1e-4);
}
