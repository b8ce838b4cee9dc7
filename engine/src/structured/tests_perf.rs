//! Not assertions: prints compile and mask times on SmolLM2 (run with `--nocapture`).

use std::time::{Duration, Instant};

use super::test_util::{backend, tokenizer};
use super::{Constraint, GrammarLimits, StructuredBackend, StructuredOutput};

/// Feeds `text` token by token, timing each `mask()`; returns (masks, total, max).
fn feed(c: &mut Constraint, ids: &[u32]) -> (u32, Duration, Duration) {
    let (mut n, mut total, mut max) = (0u32, Duration::ZERO, Duration::ZERO);
    for &id in ids {
        let t = Instant::now();
        c.mask().unwrap();
        let d = t.elapsed();
        n += 1;
        total += d;
        max = max.max(d);
        c.commit(id).unwrap();
    }
    (n, total, max)
}

#[test]
fn report_compile_and_mask_time() {
    let (Some(b), Some(tok)) = (backend(), tokenizer()) else {
        return;
    };
    let t = Instant::now();
    let _fresh = StructuredBackend::new(tok, tok.vocab_size, GrammarLimits::default()).unwrap();
    eprintln!("structured timing: backend (trie + factory) {:?}", t.elapsed());
    let cases = [
        (
            "person schema",
            StructuredOutput::JsonSchema(super::tests::person_schema()),
            r#"{"name":"Ada Lovelace","age":36,"tags":["math","poetry"]}"#,
        ),
        (
            "json_object",
            StructuredOutput::JsonObject,
            r#"{"summary":"The quick brown fox jumps over the lazy dog, again and again.","n":[1,2,3],"ok":true}"#,
        ),
        (
            "json.gbnf",
            StructuredOutput::Gbnf(super::tests_gbnf::JSON_GBNF.into()),
            r#"{"summary": "The quick brown fox jumps over the lazy dog, again and again.", "n": [1, 2, 3], "ok": true}"#,
        ),
        (
            "regex",
            StructuredOutput::Regex(r"[A-Z][a-z]+( [a-z]+){2,8}\.".into()),
            "Structured outputs keep the model on track.",
        ),
    ];
    for (name, spec, text) in cases {
        let t0 = Instant::now();
        let mut c = b.compile(&spec).unwrap();
        let compile = t0.elapsed();
        let ids = tok.encode(text, false).unwrap();
        let (n, total, max) = feed(&mut c, &ids);
        let (inner, computed) = c.mask_stats();
        eprintln!(
            "structured timing [{name}]: compile {compile:?}; {n} masks: mean {:?}, max {:?} \
             (mask_stats: {computed} computed, {inner:?})",
            total / n.max(1),
            max
        );
    }
}

/// A schema the size of a long tool list (about 50 KB), compiled cold then from the cache.
#[test]
fn report_grammar_cache() {
    let Some(tok) = tokenizer() else { return };
    let b = StructuredBackend::new(tok, tok.vocab_size, GrammarLimits::default()).unwrap();
    let properties: serde_json::Map<String, serde_json::Value> = (0..300)
        .map(|i| {
            let schema = match i % 3 {
                0 => serde_json::json!({"type": "string", "pattern": format!("^[a-z]{{1,{}}}-[0-9]+$", i % 9 + 1), "description": "x".repeat(60)}),
                1 => serde_json::json!({"type": "integer", "minimum": -(i as i64), "maximum": i * 7}),
                _ => serde_json::json!({"enum": [format!("v{i}"), format!("w{i}"), i]}),
            };
            (format!("field_{i}"), schema)
        })
        .collect();
    let schema = serde_json::json!({"type": "object", "properties": properties, "additionalProperties": false});
    let spec = StructuredOutput::JsonSchema(schema.clone());
    let bytes = schema.to_string().len();
    let t = Instant::now();
    let _cold = b.compile(&spec).unwrap();
    let cold = t.elapsed();
    let t = Instant::now();
    let _warm = b.compile(&spec).unwrap();
    let warm = t.elapsed();
    eprintln!("structured timing [{bytes} B schema]: compile {cold:?}, again from the cache {warm:?}");
}
