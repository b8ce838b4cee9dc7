//! Random walks: sample seeded-random allowed tokens until EOS, then check the text with
//! validators independent of llguidance (`jsonschema`, `regex`, set membership).

use serde_json::{json, Value};

use super::test_util::{compile, is_compact_json, tokenizer, Rng};
use super::StructuredOutput;

pub(super) const WALKS: u64 = 12;
/// Past this many tokens a walk takes EOS as soon as it is allowed.
const SOFT_LIMIT: usize = 64;
/// A walk this long means the grammar does not let the output end.
const HARD_LIMIT: usize = 400;

/// One walk: returns the decoded text (EOS excluded).
pub(super) fn walk(spec: &StructuredOutput, seed: u64) -> String {
    let tok = tokenizer().expect("tokenizer");
    let mut c = compile(spec);
    let mut rng = Rng::new(seed);
    let mut ids = Vec::new();
    loop {
        if c.is_finished() {
            break;
        }
        assert!(ids.len() < HARD_LIMIT, "{spec:?} seed {seed}: no end in sight");
        let m = c.mask().unwrap_or_else(|e| panic!("{spec:?} seed {seed}: {e}"));
        let allowed: Vec<u32> = m.allowed_ids().collect();
        assert!(!allowed.is_empty());
        let eos = tok.eos_token_ids.iter().copied().find(|&e| m.allows(e));
        let (eos_ok, text_ok): (Vec<u32>, Vec<u32>) = allowed.iter().partition(|id| tok.eos_token_ids.contains(id));
        // EOS is allowed as a whole set or not at all.
        assert!(eos_ok.is_empty() || eos_ok.len() == tok.eos_token_ids.len());
        for &id in &text_ok {
            assert!(!tok.is_special(id), "special token {id} allowed");
        }
        // Prefer EOS once allowed (3 in 4, always past the soft limit) so outputs stay short
        // yet some walks go on past a first accepting point.
        if let Some(e) = eos {
            if text_ok.is_empty() || ids.len() >= SOFT_LIMIT || rng.below(4) != 0 {
                c.commit(e).unwrap();
                break;
            }
        }
        let pick = text_ok[rng.below(text_ok.len())];
        c.commit(pick).unwrap_or_else(|e| panic!("{spec:?} seed {seed}: {e}"));
        ids.push(pick);
    }
    assert!(c.is_finished());
    tok.decode(&ids, false).unwrap()
}

fn check_json_walks(schema: Value) {
    let validator = jsonschema::validator_for(&schema).expect("test schema is valid");
    let spec = StructuredOutput::JsonSchema(schema.clone());
    for seed in 0..WALKS {
        let text = walk(&spec, seed);
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{schema}: seed {seed}: {text:?} is not JSON: {e}"));
        if let Err(e) = validator.validate(&v) {
            panic!("{schema}: seed {seed}: {text:?} fails the schema: {e}");
        }
        assert!(is_compact_json(&text), "{schema}: whitespace in {text:?}");
    }
}

#[test]
fn walk_object_with_required_fields() {
    if tokenizer().is_none() {
        return;
    }
    check_json_walks(json!({
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": "string", "maxLength": 12},
            "ok": {"type": "boolean"},
            "note": {"type": "string", "maxLength": 4}
        },
        "required": ["id", "name", "ok"],
        "additionalProperties": false
    }));
}

#[test]
fn walk_enum() {
    if tokenizer().is_none() {
        return;
    }
    check_json_walks(json!({"enum": ["red", "green", "blue", 42, null, {"a": [1, 2]}]}));
}

#[test]
fn walk_nested_array_with_max_items() {
    if tokenizer().is_none() {
        return;
    }
    check_json_walks(json!({
        "type": "array",
        "items": {
            "type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": 9},
            "maxItems": 3
        },
        "minItems": 1,
        "maxItems": 4
    }));
}

#[test]
fn walk_integer_range() {
    if tokenizer().is_none() {
        return;
    }
    check_json_walks(json!({"type": "integer", "minimum": -50, "maximum": 1234}));
}

#[test]
fn walk_string_pattern_and_max_length() {
    if tokenizer().is_none() {
        return;
    }
    check_json_walks(json!({"type": "string", "pattern": "^[a-z]{2,5}-[0-9]+$", "maxLength": 10}));
    check_json_walks(json!({"type": "string", "minLength": 2, "maxLength": 6}));
}

#[test]
fn walk_regex() {
    if tokenizer().is_none() {
        return;
    }
    for rx in [r"[a-c]{1,3}(x|yz)?[0-9]{2}", r"\d{3}-\d{4}", r"(true|false|maybe) [A-Z][a-z]{0,4}"] {
        let full = regex::Regex::new(&format!("^(?:{rx})$")).unwrap();
        let spec = StructuredOutput::Regex(rx.into());
        for seed in 0..WALKS {
            let text = walk(&spec, seed);
            assert!(full.is_match(&text), "{rx}: seed {seed}: {text:?}");
        }
    }
}

#[test]
fn walk_choice() {
    if tokenizer().is_none() {
        return;
    }
    // Shared prefixes ("no" / "none" / "nonsense"): EOS must be allowed mid-way exactly
    // where a choice ends.
    let choices: Vec<String> =
        ["no", "none", "nonsense", "yes", "maybe later", "🦀 crab", "a\"b"].iter().map(|s| s.to_string()).collect();
    let spec = StructuredOutput::Choice(choices.clone());
    let mut seen = std::collections::HashSet::new();
    for seed in 0..WALKS * 3 {
        let text = walk(&spec, seed);
        assert!(choices.contains(&text), "seed {seed}: {text:?}");
        seen.insert(text);
    }
    assert!(seen.len() >= 3, "walks should reach several choices: {seen:?}");
}

#[test]
fn walk_lark() {
    if tokenizer().is_none() {
        return;
    }
    let grammar = "start: item (\",\" item)*\nitem: NUM | \"x\"\nNUM: /[0-9]{1,3}/\n";
    let full = regex::Regex::new(r"^([0-9]{1,3}|x)(,([0-9]{1,3}|x))*$").unwrap();
    let spec = StructuredOutput::Lark(grammar.into());
    for seed in 0..WALKS {
        let text = walk(&spec, seed);
        assert!(full.is_match(&text), "seed {seed}: {text:?}");
    }
}
