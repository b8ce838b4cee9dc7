//! Formats on outputs shaped like Qwen2.5-Coder-0.5B-Instruct's, non-calls, the request-side
//! checks, the call schema, and streaming (hold/release, and agreement with whole parsing).

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{json, Value};

use super::schema::strict_call_schema;
use super::spec::{ToolChoiceError, ToolSpecError};
use super::*;

fn tools() -> Vec<ToolSpec> {
    ToolSpec::parse_list(&json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"]}}},
        {"type": "function", "function": {"name": "get_time"}}
    ]))
    .unwrap()
}

fn call(name: &str, arguments: &str) -> ParsedCall {
    ParsedCall { name: name.into(), arguments: arguments.into() }
}

const PARIS: &str = r#"{"city":"Paris"}"#;

fn parse(text: &str) -> Parsed {
    HermesFormat::default().parse(text, &tools())
}

fn calls_only(calls: Vec<ParsedCall>) -> Parsed {
    Parsed { content: None, calls }
}

#[test]
fn hermes_tags() {
    let one = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    assert_eq!(parse(one), calls_only(vec![call("get_weather", PARIS)]));
    let two = format!("{one}\n<tool_call>\n{{\"name\": \"get_time\", \"arguments\": {{}}}}\n</tool_call>");
    assert_eq!(parse(&two), calls_only(vec![call("get_weather", PARIS), call("get_time", "{}")]));
    // Closing tags missing: at the end of the output, and before the next call.
    let open = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n";
    assert_eq!(parse(open), calls_only(vec![call("get_weather", PARIS)]));
    let chained = format!("{open}<tool_call>{{\"name\": \"get_time\"}}");
    assert_eq!(parse(&chained).calls, vec![call("get_weather", PARIS), call("get_time", "{}")]);
    // Prose around the blocks is content; the text between them is kept in order.
    let got = parse(&format!("Let me check.\n{one}\nOne moment."));
    assert_eq!(got.content.as_deref(), Some("Let me check.\n\nOne moment."));
    assert_eq!(got.calls.len(), 1);
}

#[test]
fn hermes_non_calls_stay_content() {
    for text in [
        "<tool_call>\n{\"name\": \"delete_all\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>not json</tool_call>",
        "<tool_call>",
        "use <tool_call> tags",
    ] {
        assert_eq!(parse(text), Parsed { content: Some(text.into()), calls: vec![] }, "{text}");
    }
    // Tags only: bare JSON is prose for a tags-only format.
    let bare = r#"{"name": "get_weather", "arguments": {"city": "Paris"}}"#;
    let tags_only = HermesFormat { bare_json: false }.parse(bare, &tools());
    assert_eq!(tags_only.content.as_deref(), Some(bare));
}

#[test]
fn qwen_bare_json_outputs() {
    let w = call("get_weather", PARIS);
    for text in [
        r#"{"name": "get_weather", "arguments": {"city": "Paris"}}"#,
        "\n  {\"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"Paris\"}}\n",
        "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```",
        "```\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```\n",
        "```JSON\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
        r#"{"name": "get_weather", "parameters": {"city": "Paris"}}"#,
        r#"{"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}"#,
        r#"{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}"#,
    ] {
        assert_eq!(parse(text), calls_only(vec![w.clone()]), "{text}");
        assert_eq!(JsonFormat.parse(text, &tools()), calls_only(vec![w.clone()]), "{text}");
    }
    let list = r#"[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": null}]"#;
    assert_eq!(parse(list), calls_only(vec![w.clone(), call("get_time", "{}")]));
    let fenced_list = format!("```json\n{list}\n```");
    assert_eq!(parse(&fenced_list).calls.len(), 2);
    // Surrounded by prose.
    let got = parse("Sure! Here is the call:\n```json\n{\"name\": \"get_time\", \"arguments\": {}}\n```\nDone.");
    assert_eq!(got.content.as_deref(), Some("Sure! Here is the call:\n\nDone."));
    assert_eq!(got.calls, vec![call("get_time", "{}")]);
    // Empty string arguments are no arguments.
    assert_eq!(parse(r#"{"name": "get_time", "arguments": ""}"#).calls, vec![call("get_time", "{}")]);
}

#[test]
fn non_calls_stay_content() {
    for text in [
        "fn main() { println!(\"{}\", x); }",
        "The set {1, 2} and the list [1, 2].",
        r#"{"name": "unknown_tool", "arguments": {}}"#,
        r#"{"name": "get_weather", "city": "Paris"}"#,
        r#"{"name": "get_weather", "arguments": 5}"#,
        r#"{"name": "get_weather", "arguments": "[1]"}"#,
        r#"{"result": {"name": "get_weather", "arguments": {}}}"#,
        r#"[{"name": "get_weather", "arguments": {}}, 3]"#,
        "[]",
        "```python\ndef f():\n    return {}\n```",
        "{\"a\": 1.5e3, \"b\": [true, null]}",
        "```json\n{\"name\": \"get_time\"}\nthen more\n```x",
    ] {
        let got = parse(text);
        assert!(got.calls.is_empty() || text.ends_with("```x"), "{text}: {got:?}");
        if got.calls.is_empty() {
            assert_eq!(got.content.as_deref(), Some(text.trim()), "{text}");
        }
    }
    // Unclosed values: a truncated list still yields its finished calls.
    let cut = r#"[{"name": "get_time", "arguments": {}}, {"name": "get_wea"#;
    let got = parse(cut);
    assert_eq!(got.calls, vec![call("get_time", "{}")]);
    assert_eq!(got.content.as_deref(), Some(r#"[, {"name": "get_wea"#));
    assert_eq!(parse("  \n "), Parsed::default());
    // No tools declared: nothing is a call.
    let text = r#"{"name": "get_time", "arguments": {}}"#;
    assert_eq!(HermesFormat::default().parse(text, &[]).content.as_deref(), Some(text));
}

#[test]
fn tool_spec_errors_name_the_field() {
    let cases = [
        (json!({}), "tools"),
        (json!([1]), "tools[0]"),
        (json!([{"function": {"name": "f"}}]), "tools[0].type"),
        (json!([{"type": "retrieval", "function": {"name": "f"}}]), "tools[0].type"),
        (json!([{"type": "function"}]), "tools[0].function"),
        (json!([{"type": "function", "function": {}}]), "tools[0].function.name"),
        (json!([{"type": "function", "function": {"name": "a b"}}]), "tools[0].function.name"),
        (json!([{"type": "function", "function": {"name": "f", "description": 3}}]), "tools[0].function.description"),
        (json!([{"type": "function", "function": {"name": "f", "parameters": []}}]), "tools[0].function.parameters"),
        (
            json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]),
            "tools[0].function.parameters",
        ),
        (json!([{"type": "function", "function": {"name": "f", "strict": "yes"}}]), "tools[0].function.strict"),
        (
            json!([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]),
            "tools[1].function.name",
        ),
    ];
    for (tools, field) in cases {
        let err = ToolSpec::parse_list(&tools).unwrap_err();
        assert_eq!(err.field(), field, "{tools}");
        assert!(err.to_string().starts_with(&format!("{field}: ")), "{err}");
    }
    assert_eq!(
        ToolSpec::parse_list(&json!([{"type": "function", "function": {"name": "x\"y"}}])),
        Err(ToolSpecError::BadName { index: 0, name: "x\"y".into() })
    );
    let t = tools();
    assert_eq!(t[0].description.as_deref(), Some("Weather"));
    assert_eq!(t[1].parameters, json!({"type": "object"}));
    assert!(ToolSpec::parse_list(&json!([])).unwrap().is_empty());
}

#[test]
fn tool_choice_forms() {
    let t = tools();
    let p = |v: Value| ToolChoice::parse(Some(&v), &t);
    assert_eq!(ToolChoice::parse(None, &t), Ok(ToolChoice::Auto));
    assert_eq!(ToolChoice::parse(None, &[]), Ok(ToolChoice::None));
    assert_eq!(p(json!("none")), Ok(ToolChoice::None));
    assert_eq!(p(json!("auto")), Ok(ToolChoice::Auto));
    assert_eq!(p(json!("required")), Ok(ToolChoice::Required));
    assert_eq!(
        p(json!({"type": "function", "function": {"name": "get_time"}})),
        Ok(ToolChoice::Function("get_time".into()))
    );
    assert_eq!(
        p(json!({"type": "function", "function": {"name": "nope"}})),
        Err(ToolChoiceError::UnknownFunction("nope".into()))
    );
    assert_eq!(p(json!("always")), Err(ToolChoiceError::UnknownMode("always".into())));
    assert_eq!(p(json!({"name": "get_time"})), Err(ToolChoiceError::BadShape));
    assert_eq!(p(json!(1)), Err(ToolChoiceError::BadShape));
    assert_eq!(ToolChoice::parse(Some(&json!("required")), &[]), Err(ToolChoiceError::NoTools));
    assert_eq!(ToolChoice::parse(Some(&json!("none")), &[]), Ok(ToolChoice::None));
    assert!(ToolChoiceError::NoTools.to_string().starts_with("tool_choice: "));
}

/// The JSON Schema subset `call_schema` uses, checked by hand.
fn valid(schema: &Value, v: &Value) -> bool {
    let s = |k: &str| schema.get(k);
    if let Some(c) = s("const") {
        return c == v;
    }
    if let Some(Value::Array(alts)) = s("anyOf") {
        return alts.iter().any(|a| valid(a, v));
    }
    let typed = match s("type").and_then(Value::as_str) {
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        Some("string") => v.is_string(),
        Some(_) => false,
        None => true,
    };
    let props = s("properties").and_then(Value::as_object);
    let object_ok = v.as_object().is_none_or(|o| {
        let required = s("required").and_then(Value::as_array).into_iter().flatten();
        required.filter_map(Value::as_str).all(|k| o.contains_key(k))
            && o.iter().all(|(k, x)| match props.and_then(|p| p.get(k)) {
                Some(ps) => valid(ps, x),
                None => s("additionalProperties") != Some(&json!(false)),
            })
    });
    let array_ok = v.as_array().is_none_or(|a| {
        let min = s("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
        a.len() >= min && s("items").is_none_or(|i| a.iter().all(|x| valid(i, x)))
    });
    typed && object_ok && array_ok
}

#[test]
fn call_schema_shapes() {
    let t = tools();
    assert_eq!(call_schema(&t, &ToolChoice::None, false), None);
    assert_eq!(call_schema(&t, &ToolChoice::Auto, true), None);
    assert_eq!(call_schema(&t, &ToolChoice::Function("nope".into()), false), None);
    let time_call = json!({
        "type": "object",
        "properties": {"name": {"const": "get_time"}, "arguments": {"type": "object"}},
        "required": ["name", "arguments"],
        "additionalProperties": false
    });
    let one = call_schema(&t, &ToolChoice::Function("get_time".into()), false).unwrap();
    assert_eq!(one, time_call);
    let any = call_schema(&t, &ToolChoice::Required, false).unwrap();
    assert_eq!(any["anyOf"][1], time_call);
    assert_eq!(any["anyOf"][0]["properties"]["arguments"], t[0].parameters);
    let many = call_schema(&t, &ToolChoice::Required, true).unwrap();
    assert_eq!(many, json!({"type": "array", "items": any, "minItems": 1}));

    // Under `auto`, only strict tools' parameters are enforced; none strict, nothing to do.
    assert_eq!(strict_call_schema(&t), None);
    let mut mixed = t.clone();
    mixed[1].strict = true;
    mixed[1].parameters = json!({"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]});
    let strict = strict_call_schema(&mixed).unwrap();
    assert_eq!(strict["anyOf"][0]["properties"]["arguments"], json!({"type": "object"}));
    assert_eq!(strict["anyOf"][1]["properties"]["arguments"], mixed[1].parameters);

    let good =
        [json!({"name": "get_weather", "arguments": {"city": "Paris"}}), json!({"name": "get_time", "arguments": {}})];
    let bad = [
        json!({"name": "get_weather", "arguments": {}}),
        json!({"name": "get_weather", "arguments": {"city": 3}}),
        json!({"name": "get_time"}),
        json!({"name": "other", "arguments": {}}),
        json!({"name": "get_time", "arguments": {}, "extra": 1}),
        json!([]),
    ];
    for v in &good {
        assert!(valid(&any, v), "{v}");
        // What the schema admits, the bare-JSON parser reads as that call.
        let text = v.to_string();
        let parsed = JsonFormat.parse(&text, &t);
        assert_eq!(parsed.calls.len(), 1, "{text}");
        assert_eq!(parsed.calls[0].arguments, v["arguments"].to_string());
    }
    for v in &bad {
        assert!(!valid(&any, v), "{v}");
    }
    let list = Value::Array(good.to_vec());
    assert!(valid(&many, &list) && !valid(&many, &json!([])) && !valid(&many, &good[0]));
    assert_eq!(JsonFormat.parse(&list.to_string(), &t).calls.len(), 2);
    assert!(valid(&one, &good[1]) && !valid(&one, &good[0]));
}

/// Streams `text` in pieces of the given sizes (cycled, cut on character boundaries).
fn stream_text(text: &str, sizes: &[usize]) -> (Vec<ToolDelta>, String, Vec<ParsedCall>) {
    let mut s = ToolCallStream::new(Arc::new(HermesFormat::default()), tools());
    let mut deltas = Vec::new();
    let (mut at, mut i) = (0, 0);
    while at < text.len() {
        let mut end = (at + sizes[i % sizes.len()].max(1)).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        deltas.extend(s.push(&text[at..end]));
        at = end;
        i += 1;
    }
    deltas.extend(s.finish());
    let (mut content, mut calls) = (String::new(), Vec::new());
    for d in &deltas {
        match d {
            ToolDelta::Content(c) => content.push_str(c),
            ToolDelta::Call { index, id, name, arguments } => {
                assert_eq!(*index, calls.len());
                assert!(id.starts_with("call_") && id.len() == 29, "{id}");
                calls.push(call(name, arguments));
            }
        }
    }
    (deltas, content, calls)
}

fn assert_stream_matches_parse(text: &str, sizes: &[usize]) {
    let (_, content, calls) = stream_text(text, sizes);
    let whole = parse(text);
    assert_eq!(content, whole.content.unwrap_or_default(), "{text:?} in {sizes:?}");
    assert_eq!(calls, whole.calls, "{text:?} in {sizes:?}");
}

#[test]
fn stream_releases_prose_and_holds_possible_calls() {
    let mut s = ToolCallStream::new(Arc::new(HermesFormat::default()), tools());
    assert_eq!(s.push("  Hel"), vec![ToolDelta::Content("Hel".into())]);
    // Trailing whitespace waits for more prose; a `{` that is not a call opener goes at once.
    assert_eq!(s.push("lo "), vec![ToolDelta::Content("lo".into())]);
    assert_eq!(s.push("{x"), vec![ToolDelta::Content(" {x".into())]);
    // A possible tag is held until it turns out not to be one.
    assert_eq!(s.push(" <tool_"), vec![]);
    assert!(s.is_holding());
    assert_eq!(s.push("box>"), vec![ToolDelta::Content(" <tool_box>".into())]);
    assert!(!s.is_holding());
    assert_eq!(s.finish(), vec![]);

    // A call opening the output is held, then sent whole as soon as it is complete.
    let mut s = ToolCallStream::new(Arc::new(HermesFormat::default()), tools());
    assert_eq!(s.push("\n{\"name\": \"get_weather\", "), vec![]);
    assert_eq!(s.push("\"arguments\": {\"city\": \"Paris\"}"), vec![]);
    let done = s.push("}");
    assert!(
        matches!(&done[..], [ToolDelta::Call { index: 0, name, arguments, .. }]
        if name == "get_weather" && arguments == PARIS),
        "{done:?}"
    );
    assert_eq!(s.calls_sent(), 1);
    assert_eq!(s.finish(), vec![]);

    // Prose, then a tagged call: the prose streams; the call goes out at its closing tag.
    let mut s = ToolCallStream::new(Arc::new(HermesFormat::default()), tools());
    assert_eq!(
        s.push("Checking.\n<tool_call>\n{\"name\": \"get_time\"}"),
        vec![ToolDelta::Content("Checking.".into())]
    );
    assert_eq!(s.push("\n"), vec![]);
    assert!(matches!(&s.push("</tool_call>")[..], [ToolDelta::Call { index: 0, .. }]));
    // A JSON value that is not a call is released once complete (with the whitespace held
    // since the prose before the call).
    assert_eq!(s.push(" {\"a\": 1"), vec![]);
    assert_eq!(s.push("}"), vec![ToolDelta::Content("\n {\"a\": 1}".into())]);
    // Missing closing tag at the end: finish settles it.
    assert_eq!(s.push("<tool_call>{\"name\": \"get_time\"}\n"), vec![]);
    assert!(matches!(&s.finish()[..], [ToolDelta::Call { index: 1, .. }]));
}

#[test]
fn stream_matches_whole_parse_on_examples() {
    let examples = [
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "Sure.\n```json\n{\"name\": \"get_time\", \"arguments\": {}}\n```\nBye",
        "[{\"name\": \"get_time\"}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
        "{\"name\": \"get_weather\", \"arguments\": {\"t\": -1.5e-3}} and {\"n\": 12.25}",
        "prose ``` not a fence ``json `` {}",
        "<tool_call>{\"name\": \"get_time\"}<tool_call>{\"name\": \"nope\"}</tool_call>",
        "```js\nconsole.log({a: 1})\n```",
        "  ",
        "héllo {\"name\": \"get_time\"} wörld",
    ];
    for text in examples {
        for sizes in [&[1usize][..], &[2], &[3, 1, 7], &[1000]] {
            assert_stream_matches_parse(text, sizes);
        }
    }
}

#[test]
fn call_ids_look_like_openai_ids() {
    let a = new_call_id();
    let b = new_call_id();
    assert_ne!(a, b);
    assert_eq!(a.len(), 29);
    assert!(a.starts_with("call_") && a[5..].chars().all(|c| c.is_ascii_alphanumeric()));
}

/// Pieces that make up calls, near-calls and prose.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("<tool_call>".to_string()),
        Just("</tool_call>".to_string()),
        Just("```".to_string()),
        Just("json".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just(", ".to_string()),
        Just(": ".to_string()),
        Just("\"name\"".to_string()),
        Just("\"arguments\"".to_string()),
        Just("\"get_time\"".to_string()),
        Just("\"get_weather\"".to_string()),
        Just("{\"name\": \"get_time\", \"arguments\": {}}".to_string()),
        Just("1.5".to_string()),
        Just("-".to_string()),
        Just("\n".to_string()),
        Just(" ".to_string()),
        "[a-zé ]{0,4}",
    ]
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in any::<String>(), sizes in prop::collection::vec(1usize..9, 1..4)) {
        let _ = parse(&text);
        let _ = JsonFormat.parse(&text, &tools());
        assert_stream_matches_parse(&text, &sizes);
    }

    #[test]
    fn streaming_agrees_with_whole_parse(
        parts in prop::collection::vec(fragment(), 0..24),
        sizes in prop::collection::vec(1usize..9, 1..4),
    ) {
        assert_stream_matches_parse(&parts.concat(), &sizes);
    }
}

#[test]
fn a_stream_limited_to_one_call_drops_the_rest() {
    let text = format!(
        r#"<tool_call>{{"name":"get_weather","arguments":{PARIS}}}</tool_call><tool_call>{{"name":"get_time","arguments":{{}}}}</tool_call>"#
    );
    let mut all = ToolCallStream::new(Arc::new(HermesFormat::default()), tools());
    let mut one = ToolCallStream::new(Arc::new(HermesFormat::default()), tools()).with_max_calls(1);
    let count = |deltas: Vec<ToolDelta>| deltas.iter().filter(|d| matches!(d, ToolDelta::Call { .. })).count();
    assert_eq!(count([all.push(&text), all.finish()].concat()), 2);
    assert_eq!(count([one.push(&text), one.finish()].concat()), 1);
    assert_eq!(one.calls_sent(), 1);
}
