//! Structured outputs through the engine on SmolLM2: outputs sampled at temperature 1 under
//! generated JSON schemas validate against them (checked by the `jsonschema` crate, not by
//! llguidance), and constrained requests leave the unconstrained ones of the same batch exact.

use entrobatch_testkit::common;

use entrobatch::structured::StructuredOutput;
use entrobatch::{
    Decoding, Engine, EngineConfig, EngineError, FinishReason, GenerationParams, Prompt, Request, SamplingParams,
};
use proptest::strategy::{Just, Strategy, ValueTree};
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};

fn engine() -> Engine {
    let mut config = EngineConfig::new(common::smollm2_path());
    config.kv_cache_bytes = 256 << 20;
    Engine::start(config).expect("engine")
}

fn sampled(seed: u64, max_tokens: usize, structured: Option<StructuredOutput>) -> GenerationParams {
    GenerationParams {
        sampling: SamplingParams { temperature: 1.0, seed: Some(seed), ..SamplingParams::default() },
        max_tokens,
        structured,
        ..GenerationParams::default()
    }
}

/// Leaf schemas with bounded output, so a sampled model finishes within `max_tokens`.
fn leaf() -> impl Strategy<Value = Value> {
    proptest::prop_oneof![
        (-50i64..50, 1i64..100).prop_map(|(lo, span)| json!({"type": "integer", "minimum": lo, "maximum": lo + span})),
        (-10i64..10).prop_map(|lo| json!({"type": "number", "minimum": lo, "maximum": lo + 5})),
        Just(json!({"type": "boolean"})),
        (1usize..10).prop_map(|n| json!({"type": "string", "maxLength": n})),
        proptest::collection::vec("[a-z]{1,6}", 1..4).prop_map(|v| json!({"enum": v})),
        Just(json!({"type": "string", "pattern": "^[a-z]{1,5}[0-9]{0,2}$"})),
        Just(json!({"type": "null"})),
    ]
}

fn object_of(fields: impl Strategy<Value = Value> + Clone + 'static) -> impl Strategy<Value = Value> {
    proptest::collection::vec(("[a-z]{1,6}", fields, proptest::bool::ANY), 1..4).prop_map(|props| {
        let mut properties = serde_json::Map::new();
        let mut required = Vec::new();
        for (name, schema, req) in props {
            if req && !properties.contains_key(&name) {
                required.push(json!(name.clone()));
            }
            properties.insert(name, schema);
        }
        json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
    })
}

/// Objects (nested up to two levels), arrays with bounds, enums, numbers with bounds,
/// strings with patterns and lengths.
fn schema() -> impl Strategy<Value = Value> {
    let array = leaf().prop_flat_map(|item| {
        (0usize..2, 1usize..3).prop_map(move |(min, extra)| {
            json!({"type": "array", "items": item.clone(), "minItems": min, "maxItems": min + extra})
        })
    });
    let field = proptest::prop_oneof![3 => leaf(), 1 => array];
    let inner = object_of(field.clone());
    object_of(proptest::prop_oneof![4 => field, 1 => inner])
}

#[test]
fn sampled_outputs_validate_against_200_generated_schemas() {
    let engine = engine();
    let mut runner =
        TestRunner::new(Config { rng_seed: proptest::test_runner::RngSeed::Fixed(7), ..Config::default() });
    let schemas: Vec<Value> = (0..200).map(|_| schema().new_tree(&mut runner).expect("schema").current()).collect();
    let requests = schemas
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let prompt = Prompt::Text(format!("A JSON record, item {i}:"));
            Request::new(prompt, sampled(1000 + i as u64, 160, Some(StructuredOutput::JsonSchema(s.clone()))))
        })
        .collect();
    let outputs: Vec<_> = engine
        .submit_all(requests)
        .expect("every generated schema compiles")
        .into_iter()
        .map(|h| h.collect_blocking())
        .collect();
    let mut stopped = 0;
    for (schema, out) in schemas.iter().zip(&outputs) {
        assert_ne!(out.finish_reason, FinishReason::Error, "{schema}: {:?}", out.error);
        if out.finish_reason == FinishReason::Length {
            assert_eq!(out.token_ids.len(), 160);
            continue;
        }
        stopped += 1;
        let value: Value = serde_json::from_str(&out.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?} for schema {schema}", out.text));
        let validator = jsonschema::validator_for(schema).expect("a valid schema");
        let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{} does not match {schema}: {errors:?}", out.text);
    }
    // Compact JSON of bounded schemas: nearly all finish inside the budget.
    assert!(stopped >= 190, "only {stopped} of 200 finished with stop");
}

#[test]
fn regex_choice_and_lark_constrain_sampled_outputs() {
    let engine = engine();
    let regex = regex::Regex::new("^[0-9]{3}-[A-Z]{2}$").expect("regex");
    let cases = [
        StructuredOutput::Regex("[0-9]{3}-[A-Z]{2}".into()),
        StructuredOutput::Choice(vec!["red".into(), "green".into(), "a longer answer".into()]),
        StructuredOutput::Lark("start: \"yes\" | \"no\" NUMBER\nNUMBER: /[0-9]{1,3}/".into()),
        StructuredOutput::JsonObject,
    ];
    for (k, spec) in cases.iter().enumerate() {
        let requests = (0..8)
            .map(|i| Request::new(Prompt::Text("Answer:".into()), sampled(i * 31 + k as u64, 128, Some(spec.clone()))))
            .collect();
        let mut stopped = 0;
        for out in engine.submit_all(requests).expect("submit").into_iter().map(|h| h.collect_blocking()) {
            // Any JSON object admits strings of any length: at temperature 1 some run out of
            // tokens. The bounded grammars always finish.
            if out.finish_reason == FinishReason::Length && *spec == StructuredOutput::JsonObject {
                continue;
            }
            stopped += 1;
            assert_eq!(out.finish_reason, FinishReason::Stop, "{spec:?}: {:?} {:?}", out.text, out.error);
            let text = out.text.as_str();
            let ok = match spec {
                StructuredOutput::Regex(_) => regex.is_match(text),
                StructuredOutput::Choice(c) => c.iter().any(|s| s == text),
                StructuredOutput::Lark(_) => {
                    text == "yes"
                        || text
                            .strip_prefix("no")
                            .is_some_and(|n| (1..=3).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_digit()))
                }
                _ => serde_json::from_str::<Value>(text).is_ok_and(|v| v.is_object()),
            };
            assert!(ok, "{spec:?} produced {text:?}");
        }
        assert!(stopped >= 4, "{spec:?}: only {stopped} of 8 finished");
    }
}

/// Constrained, unconstrained, entropix and MTI requests in one continuous batch: the
/// unconstrained seeded requests draw exactly the tokens they draw alone, and the
/// constrained ones under every strategy (branching included) still match their schema.
#[test]
fn a_mixed_batch_leaves_unconstrained_requests_exact() {
    let engine = engine();
    let schema = json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"], "additionalProperties": false});
    let free = |i: u64| Request::new(Prompt::Text(format!("Story number {i}: once upon a time")), sampled(i, 24, None));
    let alone: Vec<Vec<u32>> =
        (0..4).map(|i| engine.submit(free(i)).expect("submit").collect_blocking().token_ids).collect();
    let constrained = |decoding: Decoding, seed: u64| {
        let mut params = sampled(seed, 96, Some(StructuredOutput::JsonSchema(schema.clone())));
        params.decoding = decoding;
        Request::new(Prompt::Text("A person as JSON:".into()), params)
    };
    let mut batch: Vec<Request> = (0..4).map(free).collect();
    batch.push(constrained(Decoding::Plain, 11));
    batch.push(constrained(Decoding::Entropix(Default::default()), 12));
    batch.push(constrained(
        Decoding::Mti(entrobatch::strategy::MtiConfig { entropy_threshold: -1.0, ..Default::default() }),
        13,
    ));
    // Branching at every token: each continuation carries its own fork of the grammar.
    let branch = entrobatch::strategy::BranchConfig { entropy_threshold: 0.0, lookahead: 4, ..Default::default() };
    batch.push(constrained(Decoding::Branch(branch), 15));
    batch.push(Request::new(
        Prompt::Text("Entropix, free:".into()),
        GenerationParams { decoding: Decoding::Entropix(Default::default()), ..sampled(14, 24, None) },
    ));
    let outputs: Vec<_> = engine.submit_all(batch).expect("submit").into_iter().map(|h| h.collect_blocking()).collect();
    for (i, reference) in alone.iter().enumerate() {
        assert_eq!(&outputs[i].token_ids, reference, "unconstrained request {i} changed in a mixed batch");
    }
    let validator = jsonschema::validator_for(&schema).expect("schema");
    for out in &outputs[4..8] {
        assert_eq!(out.finish_reason, FinishReason::Stop, "{:?} {:?}", out.text, out.error);
        let value: Value = serde_json::from_str(&out.text).expect("JSON");
        assert!(validator.is_valid(&value), "{value}");
    }
    let stats = outputs[7].strategy_stats.as_ref().expect("branch stats");
    assert!(stats["branch_points"].as_u64() > Some(0), "{stats}");
}

#[test]
fn bad_constraints_are_refused_before_the_loop() {
    let engine = engine();
    let bad = [
        StructuredOutput::JsonSchema(json!({"type": "nonsense"})),
        StructuredOutput::Regex("(".into()),
        StructuredOutput::Lark("start: undefined_rule".into()),
        StructuredOutput::Choice(Vec::new()),
    ];
    for spec in bad {
        let err = engine.submit(Request::new(Prompt::Text("x".into()), sampled(1, 8, Some(spec.clone())))).err();
        assert!(matches!(&err, Some(EngineError::Structured(e)) if e.is_client_error()), "{spec:?}: {err:?}");
    }
    let mut params = sampled(1, 8, Some(StructuredOutput::JsonObject));
    params.ignore_eos = true;
    let err = engine.submit(Request::new(Prompt::Text("x".into()), params)).err();
    assert!(matches!(err, Some(EngineError::InvalidRequest { field: "ignore_eos", .. })), "{err:?}");
    assert_eq!(engine.in_flight(), 0);
}

/// Jump-forward: tokens the grammar forces (long property names, punctuation) are appended
/// without a forward each, so one constrained request alone takes fewer engine steps than it
/// has output tokens; asking for logprobs turns it off (a forced token has no distribution).
#[test]
fn forced_tokens_are_appended_without_a_forward_each() {
    let engine = engine();
    let schema = json!({
        "type": "object",
        "properties": {
            "the_first_rather_long_property_name": {"type": "boolean"},
            "another_property_whose_name_is_forced": {"type": "boolean"}
        },
        "required": ["the_first_rather_long_property_name", "another_property_whose_name_is_forced"],
        "additionalProperties": false
    });
    let steps = || entrobatch::EngineMetrics::get(&engine.metrics().steps);
    let run = |logprobs: Option<usize>| {
        let mut params = sampled(5, 64, Some(StructuredOutput::JsonSchema(schema.clone())));
        params.sampling.logprobs = logprobs;
        let before = steps();
        let out = engine.submit(Request::new(Prompt::Text("JSON:".into()), params)).expect("submit").collect_blocking();
        assert_eq!(out.finish_reason, FinishReason::Stop, "{:?}", out.text);
        let value: Value = serde_json::from_str(&out.text).expect("JSON");
        assert!(jsonschema::validator_for(&schema).expect("schema").is_valid(&value), "{value}");
        (out.token_ids.len() as u64, steps() - before)
    };
    let (tokens, forwards) = run(None);
    assert!(forwards < tokens / 2, "{tokens} tokens took {forwards} steps: nothing was fast-forwarded");
    let (tokens, forwards) = run(Some(1));
    // The loop counts a step after applying its tokens, so the request's last step may not be
    // counted yet when its result arrives: allow one.
    assert!(forwards + 1 >= tokens, "with logprobs every token is sampled: {tokens} tokens in {forwards} steps");
}

/// Under memory pressure constrained requests are preempted and recomputed; the grammar state
/// lives with the request, not the KV, so every output still matches its schema.
#[test]
fn constrained_requests_survive_preemption() {
    let config = common::pressured_config(&common::smollm2_path(), entrobatch::MatmulMode::default(), 24, 16);
    let engine = Engine::start(config).expect("engine");
    let schema = json!({"type": "object", "properties": {"words": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 12}, "n": {"type": "integer"}}, "required": ["words", "n"], "additionalProperties": false});
    let requests = (0..16)
        .map(|i| {
            let prompt = Prompt::Text(format!("Request {i}: a list of words as JSON, please, with a count."));
            Request::new(prompt, sampled(300 + i, 64, Some(StructuredOutput::JsonSchema(schema.clone()))))
        })
        .collect();
    let outputs: Vec<_> =
        engine.submit_all(requests).expect("submit").into_iter().map(|h| h.collect_blocking()).collect();
    assert!(
        entrobatch::EngineMetrics::get(&engine.metrics().preemptions) > 0,
        "the pool was large enough: no preemption"
    );
    let validator = jsonschema::validator_for(&schema).expect("schema");
    for out in &outputs {
        assert_ne!(out.finish_reason, FinishReason::Error, "{:?}", out.error);
        if out.finish_reason == FinishReason::Stop {
            let value: Value = serde_json::from_str(&out.text).expect("JSON");
            assert!(validator.is_valid(&value), "{value}");
        }
    }
    assert!(outputs.iter().filter(|o| o.finish_reason == FinishReason::Stop).count() >= 8);
}
