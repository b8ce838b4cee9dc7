//! Speculative decoding must be invisible in the output: with drafts verified inside the batch,
//! every request draws exactly the tokens it draws without them (greedy or seeded sampling,
//! alone or batched, under preemption, under a grammar, from the engine's drafter or from a
//! client's predicted output), and nothing leaks.

use entrobatch_testkit::common;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{pressured_config, tiny_model, varied_prompt_ids};
use entrobatch::faults::FaultInjection;
use entrobatch::model_runner::testing::TinyModelSpec;
use entrobatch::structured::StructuredOutput;
use entrobatch::{
    Decoding, Engine, EngineConfig, EngineError, Event, GenerationOutput, GenerationParams, MatmulMode, Prompt,
    Request, SamplingParams, SpeculativeConfig,
};

fn lookup() -> SpeculativeConfig {
    // A 1-gram lookup finds a draft almost everywhere in a 320-token vocabulary.
    SpeculativeConfig { prompt_lookup_min: 1, prompt_lookup_max: 3, ..SpeculativeConfig::ngram() }
}

fn start(mut config: EngineConfig, speculative: bool) -> Engine {
    config.speculative = speculative.then(lookup);
    // A step bound by reading the weights, as a CPU decode is: extra rows cost next to nothing,
    // so the scheduler grants drafts whatever this machine's timing noise.
    config.faults = FaultInjection { slow_forward: Some(Duration::from_millis(2)), ..Default::default() };
    Engine::start(config).expect("engine")
}

/// The varied prompts, and each of them twice over so a copy of it is there to draft from.
fn prompts(engine: &Engine) -> Vec<Vec<u32>> {
    let mut prompts = varied_prompt_ids(engine);
    for p in prompts.clone() {
        let half = &p[..p.len().min(60)];
        prompts.push([half, half].concat());
    }
    prompts
}

fn run(engine: &Engine, prompts: &[Vec<u32>], params: &GenerationParams) -> Vec<Vec<u32>> {
    let requests: Vec<Request> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut params = params.clone();
            params.sampling.seed = params.sampling.seed.map(|s| s + i as u64);
            Request::new(Prompt::TokenIds(p.clone()), params)
        })
        .collect();
    let handles = engine.submit_all(requests).expect("submit");
    handles
        .into_iter()
        .map(|h| {
            let out = h.collect_blocking();
            assert_eq!(out.error, None);
            out.token_ids
        })
        .collect()
}

fn params(temperature: f32) -> GenerationParams {
    GenerationParams {
        sampling: SamplingParams { temperature, seed: Some(7), ..SamplingParams::default() },
        max_tokens: 40,
        ignore_eos: true,
        ..GenerationParams::default()
    }
}

/// Drafts verified and kept, and the KV pool whole again.
fn assert_speculated(engine: &Engine) -> (u64, u64) {
    let m = engine.metrics();
    let drafted = m.spec_decode.num_draft_tokens.load(Ordering::Relaxed);
    let accepted = m.spec_decode.num_accepted_tokens.load(Ordering::Relaxed);
    assert!(drafted > 0 && accepted > 0, "{accepted} of {drafted} draft tokens kept");
    assert!(accepted < drafted, "every draft kept: the rejection path went untested");
    assert_eq!(m.kv_blocks_used.load(Ordering::Relaxed), 0, "KV blocks leaked");
    (drafted, accepted)
}

fn same_tokens(path: &Path, temperature: f32) {
    let plain = start(EngineConfig::new(path), false);
    let spec = start(EngineConfig::new(path), true);
    let prompts = prompts(&plain);
    let expected = run(&plain, &prompts, &params(temperature));
    assert_eq!(run(&spec, &prompts, &params(temperature)), expected, "batched");
    // One at a time: the step has room for every draft, so more positions are verified.
    for (i, prompt) in prompts.iter().enumerate().take(4) {
        let mut p = params(temperature);
        p.sampling.seed = Some(7 + i as u64);
        assert_eq!(run(&spec, std::slice::from_ref(prompt), &p)[0], expected[i], "alone, prompt {i}");
    }
    assert_speculated(&spec);
}

#[test]
fn greedy_tokens_are_identical_with_speculation() {
    same_tokens(&tiny_model(&TinyModelSpec::llama(), "spec-greedy"), 0.0);
}

#[test]
fn seeded_samples_are_identical_with_speculation() {
    // Sharp enough that drafts are often kept, random enough that they are often not.
    same_tokens(&tiny_model(&TinyModelSpec::qwen2(), "spec-sampled"), 0.4);
}

#[test]
fn preemption_in_the_middle_of_speculation_loses_nothing() {
    let path = tiny_model(&TinyModelSpec::llama(), "spec-preempt");
    let config = || pressured_config(&path, MatmulMode::default(), 40, 8);
    let plain = start(config(), false);
    let spec = start(config(), true);
    let prompts = prompts(&plain);
    let params = GenerationParams { max_tokens: 120, ..params(0.0) };
    let expected = run(&plain, &prompts, &params);
    assert_eq!(run(&spec, &prompts, &params), expected);
    assert!(spec.metrics().preemptions.load(Ordering::Relaxed) > 0, "the pool never ran short");
    assert_speculated(&spec);
}

#[test]
fn a_grammar_constrains_every_verified_row() {
    let path = tiny_model(&TinyModelSpec::llama(), "spec-grammar");
    let plain = start(EngineConfig::new(&path), false);
    let spec = start(EngineConfig::new(&path), true);
    let regex = "(ab|ba|abc){3,12}";
    let params = GenerationParams {
        structured: Some(StructuredOutput::Regex(regex.into())),
        max_tokens: 40,
        ignore_eos: false,
        ..params(0.7)
    };
    let prompts: Vec<Vec<u32>> = (0..8u32).map(|i| (0..40).map(|t| (t * 7 + i) % 50 + 60).collect()).collect();
    let expected = run(&plain, &prompts, &params);
    assert_eq!(run(&spec, &prompts, &params), expected);
    let pattern = regex_lite(regex);
    for tokens in &expected {
        let text = spec.tokenizer().decode(tokens, true).expect("decode");
        assert!(pattern(&text), "{text:?} does not match {regex}");
    }
    let drafted = spec.metrics().spec_decode.num_draft_tokens.load(Ordering::Relaxed);
    assert!(drafted > 0, "no draft verified under the grammar");
}

/// `(ab|ba|abc){3,12}` without a regex crate: a tiny backtracking matcher.
fn regex_lite(_: &str) -> impl Fn(&str) -> bool {
    fn count(s: &str) -> Option<usize> {
        if s.is_empty() {
            return Some(0);
        }
        ["abc", "ab", "ba"].iter().filter_map(|p| s.strip_prefix(p).and_then(count).map(|n| n + 1)).max()
    }
    |s: &str| count(s).is_some_and(|n| (3..=12).contains(&n))
}

fn generate(engine: &Engine, prompt: &[u32], params: GenerationParams) -> GenerationOutput {
    let handle = engine.submit(Request::new(Prompt::TokenIds(prompt.to_vec()), params)).expect("submit");
    let out = handle.collect_blocking();
    assert_eq!(out.error, None);
    out
}

/// `text` with `insert` put in at about its middle (on a character boundary): an edit.
fn edited(text: &str, insert: &str) -> String {
    let mid = (0..=text.len() / 2).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    format!("{}{insert}{}", &text[..mid], &text[mid..])
}

/// A client's predicted output drafts on an engine with no drafter of its own: every request
/// gets the tokens it gets without one, greedy or seeded, whether the prediction is the answer
/// itself or the answer with an edit in its middle, and its drafts are counted as kept and
/// thrown away.
#[test]
fn a_predicted_output_is_drafted_from_and_changes_nothing() {
    let path = tiny_model(&TinyModelSpec::qwen2(), "spec-predicted");
    let engine = start(EngineConfig::new(&path), false);
    let prompts = varied_prompt_ids(&engine);
    let (mut accepted, mut rejected) = (0, 0);
    for temperature in [0.0, 0.4] {
        for (i, prompt) in prompts.iter().enumerate().take(4) {
            let mut plain = params(temperature);
            plain.sampling.seed = Some(7 + i as u64);
            let expected = generate(&engine, prompt, plain.clone());
            assert_eq!(expected.prediction, None, "no prediction, no counts");
            for prediction in [expected.text.clone(), edited(&expected.text, " zebra quartz ")] {
                let asked = GenerationParams { prediction: Some(prediction), ..plain.clone() };
                let out = generate(&engine, prompt, asked);
                assert_eq!(out.token_ids, expected.token_ids, "temperature {temperature}, prompt {i}");
                let counts = out.prediction.expect("a prediction's drafts are counted");
                accepted += counts.accepted;
                rejected += counts.rejected;
            }
        }
    }
    assert!(accepted > 0 && rejected > 0, "{accepted} prediction tokens kept, {rejected} thrown away");
    let m = engine.metrics();
    assert!(m.spec_decode.num_draft_tokens.load(Ordering::Relaxed) as usize >= accepted + rejected);
    assert_eq!(m.kv_blocks_used.load(Ordering::Relaxed), 0, "KV blocks leaked");
}

/// The tokens a step verifies reach the client together: a request whose prediction is its
/// own answer gets several tokens a step, each step's as one event, and the events still add
/// up to the answer decoded without drafts, token for token and byte for byte.
#[test]
fn a_steps_verified_tokens_are_one_event() {
    let path = tiny_model(&TinyModelSpec::qwen2(), "spec-one-event");
    let engine = start(EngineConfig::new(&path), false);
    let prompt = &varied_prompt_ids(&engine)[0];
    let expected = generate(&engine, prompt, params(0.0));
    let asked = GenerationParams { prediction: Some(expected.text.clone()), ..params(0.0) };
    let mut handle = engine.submit(Request::new(Prompt::TokenIds(prompt.to_vec()), asked)).expect("submit");
    let (mut token_ids, mut text, mut sizes) = (Vec::new(), String::new(), Vec::new());
    while let Some(event) = handle.next_blocking() {
        match event {
            Event::Tokens { tokens, text: delta } => {
                sizes.push(tokens.len());
                token_ids.extend(tokens.iter().map(|t| t.token_id));
                text.push_str(&delta);
            }
            Event::Finished { error, .. } => assert_eq!(error, None),
            Event::PromptLogprobs(_) => {}
        }
    }
    assert_eq!(token_ids, expected.token_ids);
    assert_eq!(text, expected.text);
    assert!(sizes.iter().all(|&n| n > 0), "an event without tokens: {sizes:?}");
    assert!(sizes.iter().any(|&n| n > 1), "every event carried one token: {sizes:?}");
    assert!(sizes.len() < token_ids.len(), "{} events for {} tokens", sizes.len(), token_ids.len());
}

/// `n` seeded copies of a request with a prediction share its tokens and each follow it at
/// its own pace: every copy draws what it draws without the prediction, and each counts its
/// own drafts.
#[test]
fn copies_of_a_request_each_draft_from_its_prediction() {
    let path = tiny_model(&TinyModelSpec::qwen2(), "spec-predicted-copies");
    let engine = start(EngineConfig::new(&path), false);
    let prompt = varied_prompt_ids(&engine).swap_remove(0);
    let plain = params(0.4);
    let copies = |params: GenerationParams| -> Vec<GenerationOutput> {
        let prepared =
            engine.prepare_copies(Request::new(Prompt::TokenIds(prompt.clone()), params), 3).expect("prepare");
        let handles = engine.submit_prepared(prepared).expect("submit");
        handles.into_iter().map(|h| h.collect_blocking()).collect()
    };
    let expected = copies(plain.clone());
    assert!(expected.windows(2).any(|w| w[0].token_ids != w[1].token_ids), "seeded copies draw apart");
    // The first copy's answer as every copy's prediction: the others follow it only in part.
    let asked = GenerationParams { prediction: Some(expected[0].text.clone()), ..plain };
    for (i, (out, expected)) in copies(asked).iter().zip(&expected).enumerate() {
        assert_eq!(out.error, None);
        assert_eq!(out.token_ids, expected.token_ids, "copy {i}");
        let counts = out.prediction.expect("each copy counts its prediction's drafts");
        assert!(counts.accepted + counts.rejected > 0, "copy {i} drafted from the prediction");
    }
    assert_eq!(engine.metrics().kv_blocks_used.load(Ordering::Relaxed), 0, "KV blocks leaked");
}

#[test]
fn a_request_asks_for_speculation_only_where_it_can_have_it() {
    let path = tiny_model(&TinyModelSpec::llama(), "spec-refusals");
    let plain = start(EngineConfig::new(&path), false);
    let spec = start(EngineConfig::new(&path), true);
    let asking = GenerationParams { speculative: Some(true), ..params(0.0) };
    let field = |e: EngineError| match e {
        EngineError::InvalidRequest { field, .. } => field,
        other => panic!("unexpected {other:?}"),
    };
    let refused = plain.submit(Request::new(Prompt::TokenIds(vec![70, 71]), asking.clone())).map(|_| ());
    assert_eq!(refused.map_err(field), Err("speculative"));
    let entropix = GenerationParams { decoding: Decoding::Entropix(Default::default()), ..asking.clone() };
    let refused = spec.submit(Request::new(Prompt::TokenIds(vec![70, 71]), entropix)).map(|_| ());
    assert_eq!(refused.map_err(field), Err("speculative"));
    // Turned off per request on a speculating engine: nothing is drafted for it.
    let off = GenerationParams { speculative: Some(false), ..params(0.0) };
    let prompts = prompts(&spec);
    run(&spec, &prompts, &off);
    assert_eq!(spec.metrics().spec_decode.num_drafts.load(Ordering::Relaxed), 0);
    run(&spec, &prompts, &asking);
    assert!(spec.metrics().spec_decode.num_drafts.load(Ordering::Relaxed) > 0);

    // A predicted output asks for speculation: refused where the request cannot have it, by
    // the field that asked, and when it is longer than any output can be.
    let predicted = GenerationParams { prediction: Some("a b c".into()), ..params(0.0) };
    let submit = |engine: &Engine, params: GenerationParams| {
        engine.submit(Request::new(Prompt::TokenIds(vec![70, 71]), params)).map(|_| ()).map_err(field)
    };
    let mti = GenerationParams { decoding: Decoding::Mti(Default::default()), ..predicted.clone() };
    assert_eq!(submit(&plain, mti), Err("prediction"));
    let off = GenerationParams { speculative: Some(false), ..predicted.clone() };
    assert_eq!(submit(&spec, off), Err("prediction"));
    let context = plain.info().max_model_len;
    let long = "the cat sat on the mat. ".repeat(context);
    let num_tokens =
        plain.tokenize_prompt(&Prompt::Text(long.clone()), &GenerationParams::default()).expect("tokenize");
    assert!(num_tokens.len() > context);
    assert_eq!(submit(&plain, GenerationParams { prediction: Some(long), ..params(0.0) }), Err("prediction"));
    assert_eq!(submit(&plain, predicted), Ok(()));
}
