//! Structured outputs against the real SmolLM2 tokenizer: valid instances pass token by
//! token, invalid specs are typed errors, masks cover the full logits row.

use serde_json::json;

use super::test_util::{backend, compile, in_string, tokenizer, SMOLLM2_VOCAB};
use super::{GrammarLimits, StructuredBackend, StructuredError, StructuredOutput};

pub(super) fn person_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": false
    })
}

#[test]
fn valid_instance_passes_token_by_token() {
    let Some(tok) = tokenizer() else { return };
    let spec = StructuredOutput::JsonSchema(person_schema());
    let mut c = compile(&spec);
    let text = r#"{"name":"Ada Lovelace","age":36,"tags":["math","poetry"]}"#;
    let ids = tok.encode(text, false).unwrap();
    let im_start = tok.token_id("<|im_start|>").unwrap();
    let space = tok.encode(" ", false).unwrap()[0];
    let bracket = tok.encode("[", false).unwrap()[0];
    for (i, &id) in ids.iter().enumerate() {
        let m = c.mask().unwrap();
        assert_eq!(m.len(), SMOLLM2_VOCAB);
        let shown = tok.decode(&ids[..i], false).unwrap();
        assert!(m.allows(id), "token {i} ({id}) not allowed after {shown:?}");
        // Never EOS before the object is complete, never another special token, never free
        // whitespace between JSON tokens (compact grammar).
        for &eos in &tok.eos_token_ids {
            assert!(!m.allows(eos), "EOS allowed after {shown:?}");
        }
        assert!(!m.allows(im_start));
        if !in_string(&shown) {
            assert!(!m.allows(space), "space allowed after {shown:?}");
        }
        if i == 0 {
            assert!(!m.allows(bracket), "an array cannot start an object");
        }
        c.commit(id).unwrap();
    }
    assert!(c.is_finished(), "a closed object leaves only EOS");
    let m = c.mask().unwrap();
    for &eos in &tok.eos_token_ids {
        assert!(m.allows(eos));
    }
    assert_eq!(m.count_allowed(), tok.eos_token_ids.len(), "only EOS after the end");
    c.commit(tok.eos_token_ids[0]).unwrap();
    assert!(c.is_finished());
}

#[test]
fn required_fields_cannot_be_skipped() {
    let Some(tok) = tokenizer() else { return };
    let mut c = compile(&StructuredOutput::JsonSchema(person_schema()));
    for id in tok.encode(r#"{"name":"x""#, false).unwrap() {
        c.commit(id).unwrap();
    }
    // "age" and "tags" are still required: no token may close the object (whatever its
    // tokenization), and only `,"age` may come next.
    let m = c.mask().unwrap();
    assert!(m.count_allowed() > 0);
    for id in m.allowed_ids() {
        let t = tok.decode(&[id], false).unwrap();
        assert!(!t.contains('}'), "{t:?} allowed");
        assert!(",\"age".starts_with(&t) || t.starts_with(",\"age"), "{t:?} allowed");
    }
}

#[test]
fn json_object_accepts_any_object_only() {
    let Some(tok) = tokenizer() else { return };
    let text = r#"{"a":[1,2.5,{"b":null}],"c":"x\"y","d":true}"#;
    let mut c = compile(&StructuredOutput::JsonObject);
    for id in tok.encode(text, false).unwrap() {
        assert!(c.mask().unwrap().allows(id));
        c.commit(id).unwrap();
    }
    assert!(c.is_finished());
    // A bare string is JSON but not an object.
    let mut c = compile(&StructuredOutput::JsonObject);
    let quote = tok.encode("\"", false).unwrap()[0];
    assert!(!c.mask().unwrap().allows(quote));
}

#[test]
fn eos_allowed_exactly_when_accepting() {
    let Some(tok) = tokenizer() else { return };
    let mut c = compile(&StructuredOutput::JsonSchema(json!({"type": "integer", "minimum": 0, "maximum": 999})));
    let eos = tok.eos_token_ids.clone();
    assert!(eos.len() >= 2, "SmolLM2 has <|im_end|> and <|endoftext|>");
    let m = c.mask().unwrap();
    assert!(eos.iter().all(|&e| !m.allows(e)), "empty output is not an integer");
    let seven = tok.encode("7", false).unwrap();
    assert_eq!(seven.len(), 1);
    // EOS now is rejected and leaves the state usable.
    assert!(matches!(c.commit(eos[0]), Err(StructuredError::Rejected { .. })));
    c.commit(seven[0]).unwrap();
    assert!(!c.is_finished(), "77 could still follow");
    let m = c.mask().unwrap();
    assert!(eos.iter().all(|&e| m.allows(e)), "every EOS id once accepting");
    assert!(m.allows(seven[0]));
    c.commit(eos[1]).unwrap();
    assert!(c.is_finished());
    assert!(matches!(c.commit(seven[0]), Err(StructuredError::Rejected { .. })));
}

#[test]
fn commit_rejects_disallowed_tokens_without_breaking_state() {
    let Some(tok) = tokenizer() else { return };
    let spec = StructuredOutput::Choice(vec!["yes".into(), "no".into()]);
    let maybe = tok.encode("maybe", false).unwrap()[0];
    let yes = tok.encode("yes", false).unwrap();
    // Without a mask computed (the validate path) and with one.
    for with_mask in [false, true] {
        let mut c = compile(&spec);
        if with_mask {
            assert!(!c.mask().unwrap().allows(maybe));
        }
        let err = c.commit(maybe).unwrap_err();
        assert!(matches!(err, StructuredError::Rejected { token_id, .. } if token_id == maybe));
        let err = c.commit(SMOLLM2_VOCAB as u32).unwrap_err();
        assert!(matches!(err, StructuredError::Rejected { .. }));
        for &id in &yes {
            c.commit(id).unwrap();
        }
        assert!(c.is_finished());
        assert!(c.error().is_none());
    }
}

#[test]
fn forced_tokens_spell_the_forced_prefix() {
    let Some(tok) = tokenizer() else { return };
    let mut c = compile(&StructuredOutput::JsonSchema(person_schema()));
    let forced = c.forced_tokens();
    assert!(!forced.is_empty(), "`{{\"name\":\"` is forced");
    let text = tok.decode(&forced, false).unwrap();
    assert!(r#"{"name":""#.starts_with(&text), "forced {text:?}");
    for id in forced {
        c.commit(id).unwrap();
    }
    // Inside a free string value nothing is forced.
    let mut c = compile(&StructuredOutput::JsonSchema(json!({"type": "string"})));
    let q = c.forced_tokens();
    assert!("\"".starts_with(&tok.decode(&q, false).unwrap()));
    c.commit(tok.encode("\"", false).unwrap()[0]).unwrap();
    assert!(c.forced_tokens().is_empty());
}

#[test]
fn invalid_specs_are_typed_errors() {
    let Some(b) = backend() else { return };
    let err = |spec: StructuredOutput| match b.compile(&spec) {
        Ok(_) => panic!("{spec:?} compiled"),
        Err(e) => {
            assert!(e.is_client_error(), "{e}");
            assert!(!e.to_string().is_empty());
            e
        }
    };
    let schema = |v| err(StructuredOutput::JsonSchema(v));
    assert!(matches!(schema(json!({"type": "nonsense"})), StructuredError::InvalidSchema(_)));
    assert!(matches!(schema(json!(42)), StructuredError::InvalidSchema(_)));
    assert!(matches!(schema(json!(false)), StructuredError::InvalidSchema(_)));
    assert!(matches!(
        schema(json!({"type": "string", "minLength": 5, "maxLength": 2})),
        StructuredError::InvalidSchema(_)
    ));
    assert!(matches!(schema(json!({"$ref": "#/$defs/missing"})), StructuredError::InvalidSchema(_)));
    assert!(matches!(err(StructuredOutput::Regex("(".into())), StructuredError::InvalidRegex(_)));
    assert!(matches!(err(StructuredOutput::Regex("[z-a]".into())), StructuredError::InvalidRegex(_)));
    for g in ["start: foo", "this is ((( not lark", ""] {
        assert!(matches!(err(StructuredOutput::Lark(g.into())), StructuredError::InvalidGrammar(_)));
    }
    assert!(matches!(err(StructuredOutput::Choice(vec![])), StructuredError::EmptyChoice));
}

#[test]
fn mask_covers_ids_past_the_tokenizer() {
    let Some(tok) = tokenizer() else { return };
    let row = SMOLLM2_VOCAB + 100;
    let b = StructuredBackend::new(tok, row, GrammarLimits::default()).unwrap();
    assert_eq!(b.vocab_size(), row);
    assert!(StructuredBackend::new(tok, SMOLLM2_VOCAB - 1, GrammarLimits::default()).is_err());
    // A string admits nearly every text token: a permissive mask exercises the skip path.
    let mut c = b.compile(&StructuredOutput::JsonSchema(json!({"type": "string"}))).unwrap();
    c.commit(tok.encode("\"", false).unwrap()[0]).unwrap();
    let m = c.mask().unwrap().clone();
    assert_eq!(m.len(), row);
    assert!(m.count_allowed() > SMOLLM2_VOCAB / 2, "{}", m.count_allowed());
    for id in SMOLLM2_VOCAB..row {
        assert!(!m.allows(id as u32));
    }
    let mut logits: Vec<f32> = (0..row).map(|i| (i % 97) as f32).collect();
    m.apply(&mut logits);
    for (i, &l) in logits.iter().enumerate() {
        let want = if m.allows(i as u32) { (i % 97) as f32 } else { f32::NEG_INFINITY };
        assert_eq!(l, want, "id {i}");
    }
    let pick = m.argmax_allowed(&logits).unwrap();
    assert!(m.allows(pick) && !tok.is_special(pick));
}

#[test]
fn unknown_formats_are_annotations_and_known_ones_are_enforced() {
    let Some(b) = backend() else { return };
    // Every format kept as a constraint is one llguidance enforces.
    for format in super::backend::KNOWN_FORMATS {
        b.compile(&StructuredOutput::JsonSchema(json!({"type": "string", "format": format})))
            .unwrap_or_else(|e| panic!("format {format}: {e}"));
    }
    let schema = json!({
        "type": "object",
        "properties": {
            "topic": {"type": "string", "format": "topic", "maxLength": 6},
            "day": {"type": "string", "format": "date"},
            "kind": {"const": {"format": "not-a-schema"}}
        },
        "required": ["topic", "day", "kind"],
        "additionalProperties": false
    });
    let date = regex::Regex::new(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$").unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for seed in 0..super::tests_walk::WALKS {
        let text = super::tests_walk::walk(&StructuredOutput::JsonSchema(schema.clone()), seed);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(validator.is_valid(&v), "{text:?}");
        // The const's data keeps its `format` key: only schema keywords are dropped.
        assert_eq!(v["kind"], json!({"format": "not-a-schema"}), "{text:?}");
        assert!(date.is_match(v["day"].as_str().unwrap()), "the known format stays enforced: {text:?}");
    }
}

#[test]
fn a_spec_compiled_before_is_forked_from_the_cache() {
    let Some(tok) = tokenizer() else { return };
    let b = StructuredBackend::new(tok, tok.vocab_size, GrammarLimits::default()).unwrap();
    let spec = StructuredOutput::JsonSchema(person_schema());
    let mut first = b.compile(&spec).unwrap();
    assert_eq!(b.grammars_compiled(), 1);
    // Advance the first copy: the cached grammar must stay at its start.
    let open = tok.encode("{\"name\":\"", false).unwrap();
    for &id in &open {
        first.commit(id).unwrap();
    }
    let mut second = b.compile(&spec).unwrap();
    assert_eq!(b.grammars_compiled(), 1, "the same spec compiles once");
    let word = tok.encode("Ada", false).unwrap()[0];
    assert!(first.mask().unwrap().allows(word), "inside the name's string");
    assert!(second.mask().unwrap().allows(open[0]) && !second.mask().unwrap().allows(word), "at the start");
    let space = tok.encode(" ", false).unwrap()[0];
    assert!(!second.mask().unwrap().allows(space), "a fork has the compiled grammar, compact JSON");
    // Another spec is another grammar; an invalid one is not cached as anything.
    b.compile(&StructuredOutput::Regex("[0-9]+".into())).unwrap();
    assert_eq!(b.grammars_compiled(), 2);
    assert!(b.compile(&StructuredOutput::Regex("(".into())).is_err());
    assert!(b.compile(&StructuredOutput::Regex("(".into())).is_err());
    assert_eq!(b.grammars_compiled(), 2);
}

/// Feeds `text` then EOS; the schema check of the finished output.
fn check_after(spec: &StructuredOutput, text: &str) -> (Vec<String>, Option<Vec<String>>) {
    let tok = tokenizer().expect("tokenizer");
    let mut c = compile(spec);
    for id in tok.encode(text, false).unwrap() {
        c.commit(id).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    }
    c.commit(tok.eos_token_ids[0]).unwrap();
    (c.unenforced().to_vec(), c.check_output(tok))
}

#[test]
fn keywords_a_grammar_cannot_enforce_are_checked_after_or_refused_under_strict() {
    let Some(b) = backend() else { return };
    let schema = json!({"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3, "uniqueItems": true});
    let err = b.compile(&StructuredOutput::StrictJsonSchema(schema.clone())).unwrap_err();
    assert!(matches!(&err, StructuredError::InvalidSchema(m) if m.contains("uniqueItems")), "{err}");
    // The refusal names the keyword and what a client does to have the schema served anyway.
    let message = err.to_string();
    assert!(message.contains("without strict") && message.contains("checked"), "{message}");
    let spec = StructuredOutput::JsonSchema(schema);
    let (unenforced, valid) = check_after(&spec, r#"["a","b"]"#);
    assert!(unenforced.iter().any(|w| w.contains("uniqueItems")), "{unenforced:?}");
    assert_eq!(valid, Some(vec![]));
    // The grammar lets a repeat through; the check catches it.
    let (_, invalid) = check_after(&spec, r#"["c","a","c"]"#);
    let errors = invalid.expect("checked");
    assert!(errors.len() == 1 && errors[0].contains("non-unique"), "{errors:?}");

    // A `oneOf` of overlapping branches decodes as `anyOf` and is checked against `oneOf`;
    // strict refuses it, since an output matching both branches would be invalid.
    let one_of = json!({"oneOf": [{"type": "integer", "minimum": 5}, {"type": "integer", "maximum": 10}]});
    let err = b.compile(&StructuredOutput::StrictJsonSchema(one_of.clone())).unwrap_err();
    assert!(matches!(&err, StructuredError::InvalidSchema(m) if m.contains("oneOf")), "{err}");
    // The refusal says what this API's client can do, not an llguidance option it cannot set.
    let message = err.to_string();
    assert!(message.contains("without strict") && !message.contains("coerce_one_of"), "{message}");
    let spec = StructuredOutput::JsonSchema(one_of);
    assert_eq!(check_after(&spec, "3").1, Some(vec![]));
    assert_eq!(check_after(&spec, "7").1.map(|e| e.len()), Some(1), "7 matches both");
    // Disjoint branches are an `anyOf` exactly: strict compiles them, nothing to check.
    let union = json!({"oneOf": [{"type": "integer"}, {"type": "string", "maxLength": 3}]});
    let spec = StructuredOutput::StrictJsonSchema(union);
    assert_eq!(check_after(&spec, "12").1, None);
    assert_eq!(check_after(&spec, "\"ab\"").1, None);
    // A schema the grammar enforces whole needs no check.
    assert_eq!(
        check_after(&StructuredOutput::JsonSchema(person_schema()), r#"{"name":"A","age":1,"tags":[]}"#).1,
        None
    );
}

#[test]
fn a_spec_over_the_size_limit_is_refused_before_compiling() {
    let Some(tok) = tokenizer() else { return };
    let limits = GrammarLimits { max_spec_bytes: 64, ..GrammarLimits::default() };
    let b = StructuredBackend::new(tok, tok.vocab_size, limits).unwrap();
    let err = b.compile(&StructuredOutput::JsonSchema(person_schema())).unwrap_err();
    assert!(matches!(err, StructuredError::TooLarge { kind: "json_schema", limit: 64, .. }), "{err}");
    assert!(err.is_client_error());
    assert_eq!(b.grammars_compiled(), 0);
    b.compile(&StructuredOutput::Regex("[0-9]+".into())).expect("a small spec still compiles");
}

#[test]
fn a_compile_past_its_deadline_answers_at_once_and_is_cached_for_the_next_request() {
    let Some(tok) = tokenizer() else { return };
    let limits = GrammarLimits { compile_timeout: std::time::Duration::ZERO, ..GrammarLimits::default() };
    let b = StructuredBackend::new(tok, tok.vocab_size, limits).unwrap();
    // A compile can beat a zero deadline only when this thread is descheduled between
    // starting it and waiting for it: on a loaded machine, try a few distinct specs.
    let (spec, finished_before) = (0..20)
        .find_map(|i| {
            let spec = StructuredOutput::JsonSchema(
                json!({"title": format!("t{i}"), "type": "array", "items": person_schema()}),
            );
            let before = b.grammars_compiled();
            match b.compile(&spec) {
                Err(err) => {
                    assert!(
                        matches!(err, StructuredError::CompileTimeout { kind: "json_schema", limit_ms: 0 }),
                        "{err}"
                    );
                    assert!(err.is_client_error());
                    Some((spec, before))
                }
                Ok(_) => None,
            }
        })
        .expect("no compile of 20 ran past a zero deadline");
    // The compile goes on on its own thread and lands in the cache.
    let waited = std::time::Instant::now();
    while b.grammars_compiled() == finished_before {
        assert!(waited.elapsed().as_secs() < 60, "the late compile never finished");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let compiled = b.grammars_compiled();
    let mut c = b.compile(&spec).expect("a cache hit needs no compile time");
    assert_eq!(b.grammars_compiled(), compiled, "the retry is a cache hit");
    c.commit(tok.encode("[", false).unwrap()[0]).unwrap();
}

#[test]
fn a_pattern_llguidance_cannot_compile_is_checked_after_unless_strict() {
    let Some(b) = backend() else { return };
    let schema = json!({
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^(?!x)[a-z]{2}$"},
            "id": {"type": "string", "pattern": "^[0-9]+$"}
        },
        "required": ["code", "id"],
        "additionalProperties": false
    });
    let err = b.compile(&StructuredOutput::StrictJsonSchema(schema.clone())).unwrap_err();
    assert!(matches!(&err, StructuredError::InvalidSchema(_)), "{err}");
    let spec = StructuredOutput::JsonSchema(schema);
    let (unenforced, valid) = check_after(&spec, r#"{"code":"ab","id":"7"}"#);
    assert!(unenforced.len() == 1 && unenforced[0].contains("(?!x)"), "{unenforced:?}");
    assert_eq!(valid, Some(vec![]));
    // The lookahead is not in the grammar: the check catches what it forbids.
    let (_, invalid) = check_after(&spec, r#"{"code":"xy","id":"7"}"#);
    let errors = invalid.expect("checked");
    assert!(errors.len() == 1 && errors[0].contains("/code"), "{errors:?}");
    // The other pattern stays in the grammar.
    let mut c = compile(&spec);
    let tok = tokenizer().unwrap();
    for id in tok.encode(r#"{"code":"ab","id":""#, false).unwrap() {
        c.commit(id).unwrap();
    }
    assert!(!c.mask().unwrap().allows(tok.encode("a", false).unwrap()[0]), "id stays digits only");

    // The same for a name pattern of `patternProperties`.
    let named = json!({"type": "object", "patternProperties": {"^(?!x)[a-z]+$": {"type": "integer"}}, "additionalProperties": false});
    assert!(b.compile(&StructuredOutput::StrictJsonSchema(named.clone())).is_err());
    let spec = StructuredOutput::JsonSchema(named);
    assert_eq!(check_after(&spec, r#"{"ab":1}"#).1, Some(vec![]));
    assert_eq!(check_after(&spec, r#"{"xa":1}"#).1.map(|e| e.len()), Some(1), "xa is not an allowed name");
}

#[test]
fn a_structure_llguidance_refuses_is_decoded_under_the_rest_and_checked_after_unless_strict() {
    let Some(b) = backend() else { return };
    // `kids` is both a Node (recursive) and Named: llguidance cannot expand the reference
    // inside its own definition to intersect it with the other branch.
    let recursive = json!({
        "definitions": {
            "Node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "kids": {"allOf": [{"$ref": "#/definitions/Node"}, {"$ref": "#/definitions/Named"}]}
                },
                "additionalProperties": false
            },
            "Named": {"required": ["name"]}
        },
        "$ref": "#/definitions/Node"
    });
    let err = b.compile(&StructuredOutput::StrictJsonSchema(recursive.clone())).unwrap_err();
    assert!(matches!(&err, StructuredError::InvalidSchema(m) if m.contains("circular")), "{err}");
    let spec = StructuredOutput::JsonSchema(recursive);
    let (unenforced, valid) = check_after(&spec, r#"{"kids":{"name":"a","kids":{"name":"b"}}}"#);
    assert!(unenforced.iter().any(|w| w.contains("allOf")), "{unenforced:?}");
    assert_eq!(valid, Some(vec![]));
    // The grammar keeps `Node` (no other key than name and kids), not `Named`: the check
    // catches a kid without a name.
    let (_, invalid) = check_after(&spec, r#"{"kids":{}}"#);
    let errors = invalid.expect("checked");
    assert!(errors.len() == 1 && errors[0].contains("name"), "{errors:?}");
    let mut c = compile(&spec);
    let tok = tokenizer().unwrap();
    for id in tok.encode(r#"{"kids":{""#, false).unwrap() {
        c.commit(id).unwrap();
    }
    assert!(!c.mask().unwrap().allows(tok.encode("x", false).unwrap()[0]), "Node's keys stay enforced");

    // Patterns that may match the same name ("ab"): left out, checked after.
    let overlapping = json!({
        "type": "object",
        "patternProperties": {"^a": {"type": "string"}, "b$": {"type": "integer"}},
        "additionalProperties": false
    });
    let err = b.compile(&StructuredOutput::StrictJsonSchema(overlapping.clone())).unwrap_err();
    assert!(matches!(&err, StructuredError::InvalidSchema(m) if m.contains("disjoint")), "{err}");
    let spec = StructuredOutput::JsonSchema(overlapping);
    assert_eq!(check_after(&spec, r#"{"a":"x","b":2}"#).1, Some(vec![]));
    assert_eq!(check_after(&spec, r#"{"ab":1}"#).1.map(|e| e.len()), Some(1), "ab must be a string too");

    // A refusal no step resolves stands, with llguidance's own words.
    let unsatisfiable = json!({"type": "integer", "minimum": 5, "maximum": 1});
    assert!(b.compile(&StructuredOutput::JsonSchema(unsatisfiable)).is_err());
}

/// The compact default gives way to whitespace the client's own `x-guidance` asks for.
#[test]
fn a_clients_whitespace_option_is_honoured() {
    let Some(tok) = tokenizer() else { return };
    let space = tok.encode(" ", false).unwrap()[0];
    let open = tok.encode("{", false).unwrap()[0];
    let mut schema = person_schema();
    let mut c = compile(&StructuredOutput::JsonSchema(schema.clone()));
    c.commit(open).unwrap();
    assert!(!c.mask().unwrap().allows(space), "compact by default");
    schema["x-guidance"] = json!({"whitespace_pattern": " "});
    let mut c = compile(&StructuredOutput::JsonSchema(schema));
    c.commit(open).unwrap();
    assert!(c.mask().unwrap().allows(space), "the client's whitespace");
}

/// Whether the grammar lets `text` through, token by token, to its end.
fn grammar_accepts(spec: &StructuredOutput, text: &str) -> bool {
    let tok = tokenizer().expect("tokenizer");
    let mut c = compile(spec);
    for id in tok.encode(text, false).unwrap() {
        if !c.mask().unwrap().allows(id) {
            return false;
        }
        c.commit(id).unwrap();
    }
    c.is_finished()
}

#[test]
fn properties_that_may_not_appear_together_are_enforced_by_the_grammar_even_under_strict() {
    let Some(_) = tokenizer() else { return };
    let schema = json!({
        "type": "object",
        "properties": {"id": {"type": "string"}, "site": {"type": "object"}, "app": {"type": "object"}},
        "required": ["id"],
        "additionalProperties": false,
        "not": {"required": ["site", "app"]},
    });
    for spec in [StructuredOutput::StrictJsonSchema(schema.clone()), StructuredOutput::JsonSchema(schema)] {
        for text in [r#"{"id":"x"}"#, r#"{"id":"x","site":{}}"#, r#"{"id":"x","app":{}}"#] {
            assert!(grammar_accepts(&spec, text), "{text}");
        }
        assert!(!grammar_accepts(&spec, r#"{"id":"x","site":{},"app":{}}"#), "both together");
        assert!(!grammar_accepts(&spec, r#"{"id":"x","app":{},"site":{}}"#), "both together");
        assert_eq!(check_after(&spec, r#"{"id":"x","app":{}}"#), (vec![], None), "enforced whole: nothing to check");
    }
    // Properties that may not appear at all, inside a property's schema.
    let schema = json!({
        "type": "object",
        "properties": {"bid": {"type": "object", "not": {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}}},
    });
    let spec = StructuredOutput::StrictJsonSchema(schema);
    assert!(grammar_accepts(&spec, r#"{"bid":{"c":1}}"#));
    assert!(!grammar_accepts(&spec, r#"{"bid":{"b":1}}"#));
}
