//! A model with sliding-window layers through the whole engine: its windowed KV cache groups
//! give blocks back as a sequence grows, and a request that finds a long prefix in the cache,
//! holding only the blocks each window still reads, continues as candle-transformers' Gemma 3
//! does on the whole prompt.

use entrobatch_testkit::common;

use common::{assert_close_greedy, greedy_with_logprobs, reference_greedy_with_top, tiny_model, RefArch};
use entrobatch::model_runner::testing::TinyModelSpec;
use entrobatch::model_runner::KvGroups;
use entrobatch::{Engine, EngineConfig, EngineMetrics, MatmulMode, Prompt, Request};

const TOP: usize = 5;

fn engine(path: &std::path::Path) -> Engine {
    let mut config = EngineConfig::new(path);
    config.block_size = 4;
    config.num_blocks = Some(256);
    config.max_num_batched_tokens = 32;
    config.matmul_mode = MatmulMode::Quantized;
    config.kv_cache_dtype = Some(entrobatch::KvDtype::F32);
    config.attention_kernel = entrobatch::AttentionKernel::CandleMirror;
    Engine::start(config).expect("engine")
}

#[test]
fn a_windowed_prefix_hit_continues_as_the_reference_does() {
    let path = tiny_model(&TinyModelSpec::gemma3(), "swa-engine");
    let engine = engine(&path);
    let groups = KvGroups::for_model(&engine.info().model_config);
    assert!(groups.windows().iter().any(Option::is_some), "the tiny Gemma 3 has windowed layers");
    let prompt: Vec<u32> = (0..70).map(|i| (i * 37 + 11) % 200 + 20).collect();
    let first = engine
        .submit(Request::new(Prompt::TokenIds(prompt.clone()), greedy_with_logprobs(4, TOP)))
        .expect("submit")
        .collect_blocking();
    assert_eq!(first.error, None);

    let mut longer = prompt.clone();
    longer.extend([31, 41, 59, 26, 53]);
    let out = engine
        .submit(Request::new(Prompt::TokenIds(longer.clone()), greedy_with_logprobs(24, TOP)))
        .expect("submit")
        .collect_blocking();
    assert_eq!(out.error, None);
    assert_eq!(out.cached_tokens, 68, "every full block of the shared 70 tokens is a hit");
    let got: Vec<(u32, Vec<(u32, f32)>)> = out
        .tokens
        .iter()
        .map(|t| (t.token_id, t.logprob.as_ref().map(|l| l.top_logprobs.clone()).unwrap_or_default()))
        .collect();
    let want = reference_greedy_with_top(&path, RefArch::Gemma3, &[longer], 24, TOP);
    assert_eq!(assert_close_greedy("after a windowed prefix hit", &got, &want[0]), None, "diverged");

    let metrics = engine.metrics().clone();
    engine.shutdown(entrobatch::ShutdownMode::Finish);
    assert_eq!(EngineMetrics::get(&metrics.kv_blocks_used), 0, "blocks leaked");
}

#[test]
fn a_long_sequence_holds_its_windowed_groups_blocks_bounded() {
    let path = tiny_model(&TinyModelSpec::gemma3(), "swa-engine-long");
    let engine = engine(&path);
    let groups = KvGroups::for_model(&engine.info().model_config);
    let num_windowed = groups.windows().iter().filter(|w| w.is_some()).count();
    let prompt: Vec<u32> = (0..150).map(|i| (i * 53 + 7) % 200 + 20).collect();
    let mut handle =
        engine.submit(Request::new(Prompt::TokenIds(prompt), greedy_with_logprobs(60, 0))).expect("submit");
    let metrics = engine.metrics().clone();
    let mut most_used = 0;
    while let Some(event) = handle.next_blocking() {
        most_used = most_used.max(EngineMetrics::get(&metrics.kv_blocks_used));
        if matches!(event, entrobatch::Event::Finished { .. }) {
            break;
        }
    }
    // 210 tokens: 53 blocks of 4 in the full group; a windowed group (8 keys, steps of at most
    // 32 tokens) holds at most blocks_for(8 + 32) + 2 = 12.
    let bound = 53 + num_windowed as u64 * 12;
    assert!(most_used > 53 && most_used <= bound, "{most_used} blocks in use at most, bound {bound}");
    assert!(most_used < 53 * groups.num_groups() as u64, "the windowed groups gave nothing back");
    engine.shutdown(entrobatch::ShutdownMode::Finish);
}
