//! Copies of one prompt submitted together (`n` choices) share its KV: every copy after the
//! first finds all full blocks of the prompt in the prefix cache, and draws exactly what it
//! would draw alone.

use entrobatch_testkit::common;

use common::smollm2_path;
use entrobatch::{Engine, EngineConfig, GenerationParams, Prompt, Request, SamplingParams};

fn sampled(seed: u64) -> GenerationParams {
    GenerationParams {
        sampling: SamplingParams { temperature: 1.0, seed: Some(seed), ..SamplingParams::default() },
        max_tokens: 12,
        ignore_eos: true,
        ..GenerationParams::default()
    }
}

const PROMPT: &str = "Write a short story about a lighthouse keeper who finds a message in a bottle. \
    The story should have a beginning, a middle and an end, and it should take place on a stormy night \
    in the north of Scotland, a long time ago.";

fn copies(config: EngineConfig) -> Vec<(usize, Vec<u32>)> {
    let engine = Engine::start(config).expect("engine");
    let requests = (0..4).map(|i| Request::new(Prompt::Text(PROMPT.into()), sampled(100 + i))).collect();
    let handles = engine.submit_all(requests).expect("submit");
    handles
        .into_iter()
        .map(|h| {
            let out = h.collect_blocking();
            assert_eq!(out.error, None);
            (out.cached_tokens, out.token_ids)
        })
        .collect()
}

#[test]
fn later_copies_read_the_first_copys_prompt_blocks() {
    let path = smollm2_path();
    let engine = Engine::start(EngineConfig::new(&path)).expect("engine");
    let prompt_len =
        engine.tokenize_prompt(&Prompt::Text(PROMPT.into()), &GenerationParams::default()).expect("tokenize").len();
    let alone: Vec<Vec<u32>> = (0..4)
        .map(|i| {
            engine.generate(vec![Prompt::Text(PROMPT.into())], &sampled(100 + i)).expect("alone").remove(0).token_ids
        })
        .collect();
    drop(engine);
    let block = EngineConfig::new(&path).block_size;
    let full_blocks = (prompt_len - 1) / block * block;
    assert!(full_blocks >= 2 * block, "the prompt should span several blocks ({prompt_len} tokens)");

    let shared = copies(EngineConfig::new(&path));
    assert_eq!(shared[0].0, 0, "the first copy computes the prompt");
    for (i, (cached, tokens)) in shared.iter().enumerate() {
        if i > 0 {
            assert_eq!(*cached, full_blocks, "copy {i} reads every full block of the prompt");
        }
        assert_eq!(tokens, &alone[i], "copy {i} draws what it draws alone");
    }

    let mut no_cache = EngineConfig::new(&path);
    no_cache.enable_prefix_caching = false;
    let separate = copies(no_cache);
    assert!(separate.iter().all(|(cached, _)| *cached == 0));
    assert_eq!(separate.into_iter().map(|c| c.1).collect::<Vec<_>>(), alone);
}
