//! Request lifecycle through the engine: streaming, stops, aborts, rejection, seeds, and
//! every KV block returned afterwards.

use entrobatch_testkit::common;

use std::time::{Duration, Instant};

use common::tiny_model;
use entrobatch::model_runner::testing::TinyModelSpec;
use entrobatch::{
    ChatMessage, Engine, EngineConfig, EngineError, EngineMetrics, Event, FinishReason, GenerationParams, Prompt,
    Request, SamplingParams,
};

fn tiny_engine(name: &str) -> Engine {
    let mut config = EngineConfig::new(tiny_model(&TinyModelSpec::llama(), name));
    config.num_blocks = Some(64);
    config.max_num_batched_tokens = 64;
    Engine::start(config).expect("engine")
}

fn params(max_tokens: usize) -> GenerationParams {
    GenerationParams { sampling: SamplingParams::greedy(), max_tokens, ignore_eos: true, ..GenerationParams::default() }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn abort_mid_stream_frees_blocks_at_once() {
    let engine = tiny_engine("abort");
    let metrics = engine.metrics().clone();
    let mut handle = engine.submit(Request::new(Prompt::Text("abort me please".into()), params(400))).expect("submit");
    for _ in 0..3 {
        assert!(matches!(handle.next_blocking(), Some(Event::Tokens { .. })));
    }
    assert!(EngineMetrics::get(&metrics.kv_blocks_used) > 0, "a running request holds blocks");
    handle.abort();
    let mut reason = None;
    while let Some(event) = handle.next_blocking() {
        if let Event::Finished { reason: r, .. } = event {
            reason = Some(r);
        }
    }
    assert_eq!(reason, Some(FinishReason::Abort));
    wait_until("blocks to be freed", || EngineMetrics::get(&metrics.kv_blocks_used) == 0);
}

#[test]
fn dropping_a_handle_aborts_its_request() {
    let engine = tiny_engine("drop");
    let metrics = engine.metrics().clone();
    let mut handle = engine.submit(Request::new(Prompt::Text("dropped".into()), params(400))).expect("submit");
    assert!(matches!(handle.next_blocking(), Some(Event::Tokens { .. })));
    drop(handle);
    wait_until("the abort", || EngineMetrics::get(&metrics.requests_finished[2]) == 1);
    wait_until("blocks to be freed", || EngineMetrics::get(&metrics.kv_blocks_used) == 0);
}

#[test]
fn finish_reasons_follow_max_tokens_stop_ids_and_stop_strings() {
    let engine = tiny_engine("stops");
    let prompt = || Prompt::Text("hello there".into());
    let free = engine.submit(Request::new(prompt(), params(12))).unwrap().collect_blocking();
    assert_eq!(free.finish_reason, FinishReason::Length);
    assert_eq!(free.token_ids.len(), 12);

    // Stop on the 5th token's id: the stream must end right there.
    let stop_id = free.token_ids[4];
    let first = free.token_ids.iter().position(|&t| t == stop_id).unwrap();
    let mut p = params(12);
    p.stop_token_ids = vec![stop_id];
    let stopped = engine.submit(Request::new(prompt(), p)).unwrap().collect_blocking();
    assert_eq!(stopped.finish_reason, FinishReason::Stop);
    assert_eq!(stopped.token_ids, free.token_ids[..=first].to_vec());

    // A stop string taken from the middle of the free text: output is the text before it.
    let text = free.text.clone();
    let chars: Vec<char> = text.chars().collect();
    if chars.len() >= 6 {
        let needle: String = chars[3..5].iter().collect();
        let cut = text.find(&needle).unwrap();
        let mut p = params(12);
        p.stop = vec![needle.clone()];
        let out = engine.submit(Request::new(prompt(), p)).unwrap().collect_blocking();
        assert_eq!(out.finish_reason, FinishReason::Stop, "stop string {needle:?} in {text:?}");
        assert_eq!(out.text, text[..cut]);
    }
}

#[test]
fn requests_that_can_never_fit_are_rejected_at_submit() {
    let engine = tiny_engine("reject");
    let max_len = engine.info().max_model_len;
    let err =
        engine.submit(Request::new(Prompt::Text("x".into()), params(max_len + 1))).err().expect("must be rejected");
    assert!(matches!(err, EngineError::NeverFits { .. }), "{err}");
    let err = engine.submit(Request::new(Prompt::TokenIds(vec![]), params(4))).err().unwrap();
    assert!(matches!(err, EngineError::InvalidRequest { .. }), "{err}");
    let err = engine.submit(Request::new(Prompt::TokenIds(vec![u32::MAX]), params(4))).err().unwrap();
    assert!(matches!(err, EngineError::InvalidRequest { .. }), "{err}");
    let mut bad = params(4);
    bad.sampling.top_p = 1.5;
    let err = engine.submit(Request::new(Prompt::Text("x".into()), bad)).err().unwrap();
    assert!(err.to_string().contains("top_p"), "{err}");
    // The engine still serves after all that.
    let ok = engine.submit(Request::new(Prompt::Text("x".into()), params(3))).unwrap().collect_blocking();
    assert_eq!(ok.token_ids.len(), 3);
}

#[test]
fn a_batch_submission_is_accepted_whole_or_not_at_all() {
    let mut config = EngineConfig::new(tiny_model(&TinyModelSpec::llama(), "submit-all"));
    config.num_blocks = Some(64);
    config.max_queued_requests = Some(3);
    let engine = Engine::start(config).expect("engine");
    let ok = || Request::new(Prompt::Text("fine".into()), params(4));
    let bad = Request::new(Prompt::TokenIds(vec![u32::MAX]), params(4));
    let err = engine.submit_all(vec![ok(), bad, ok()]).err().expect("one bad request fails the batch");
    assert!(matches!(err, EngineError::InvalidRequest { .. }), "{err}");
    assert_eq!(engine.in_flight(), 0, "nothing of a rejected batch may be queued");
    let err = engine.submit_all((0..4).map(|_| ok()).collect()).err().expect("4 > max_queued_requests");
    assert!(matches!(err, EngineError::QueueFull(3)), "{err}");
    assert_eq!(engine.in_flight(), 0, "a batch over the queue limit takes no slot");
    let outputs: Vec<_> = engine
        .submit_all((0..3).map(|_| ok()).collect())
        .expect("three fit")
        .into_iter()
        .map(|h| h.collect_blocking())
        .collect();
    assert!(outputs.iter().all(|o| o.error.is_none() && o.token_ids.len() == 4));
    assert_eq!(outputs[0].token_ids, outputs[2].token_ids, "same prompt, greedy");
    assert_eq!(EngineMetrics::get(&engine.metrics().kv_blocks_used), 0, "blocks leaked");
}

#[test]
fn a_seeded_request_draws_the_same_tokens_alone_and_in_a_busy_batch() {
    let engine = tiny_engine("seed");
    let seeded = GenerationParams {
        sampling: SamplingParams { temperature: 0.9, top_p: 0.95, seed: Some(1234), ..SamplingParams::default() },
        max_tokens: 24,
        ignore_eos: true,
        ..GenerationParams::default()
    };
    let prompt = || Prompt::Text("a seeded story".into());
    let alone = engine.submit(Request::new(prompt(), seeded.clone())).unwrap().collect_blocking();
    let noise: Vec<_> = (0..7)
        .map(|i| {
            let p = GenerationParams {
                sampling: SamplingParams { temperature: 1.2, seed: Some(i), ..SamplingParams::default() },
                max_tokens: 10 + i as usize * 3,
                ignore_eos: true,
                ..GenerationParams::default()
            };
            engine.submit(Request::new(Prompt::Text(format!("noise {i} {}", "z".repeat(i as usize * 9))), p)).unwrap()
        })
        .collect();
    let busy = engine.submit(Request::new(prompt(), seeded.clone())).unwrap().collect_blocking();
    for n in noise {
        n.collect_blocking();
    }
    assert_eq!(alone.token_ids, busy.token_ids);
    let other_seed =
        GenerationParams { sampling: SamplingParams { seed: Some(99), ..seeded.sampling.clone() }, ..seeded };
    let different = engine.submit(Request::new(prompt(), other_seed)).unwrap().collect_blocking();
    assert_ne!(alone.token_ids, different.token_ids, "the seed must matter");
}

#[test]
fn streamed_text_equals_the_decoded_tokens_on_smollm2() {
    let mut config = EngineConfig::new(common::smollm2_path());
    config.num_blocks = Some(64);
    let engine = Engine::start(config).unwrap();
    let chat = Prompt::Chat(vec![ChatMessage::new("user", "Write one sentence about café culture, with an emoji.")]);
    let mut p = params(40);
    p.ignore_eos = false;
    let mut handle = engine.submit(Request::new(chat, p)).unwrap();
    let prompt_text = engine.tokenizer().decode(&handle.prompt_token_ids, false).unwrap();
    assert!(prompt_text.contains("<|im_start|>user\nWrite one sentence"), "{prompt_text}");
    assert!(prompt_text.ends_with("<|im_start|>assistant\n"), "{prompt_text}");
    let (mut text, mut ids) = (String::new(), Vec::new());
    while let Some(event) = handle.next_blocking() {
        if let Event::Tokens { tokens, text: delta } = event {
            assert!(!delta.contains('\u{FFFD}'), "a delta split a character: {delta:?}");
            ids.extend(tokens.iter().map(|t| t.token_id));
            text.push_str(&delta);
        }
    }
    assert!(!ids.is_empty());
    assert_eq!(text, engine.tokenizer().decode(&ids, true).unwrap());
}
