//! Best effort for structures llguidance refuses to compile. Its JSON compiler intersects a
//! `$ref` with what constrains the same value beside it (keywords next to the `$ref`, the
//! other branches of an `allOf`, a `type` next to an `anyOf` of references, a property's
//! schema and a `patternProperties` schema matching its name) by expanding the reference,
//! which it cannot do inside the reference's own definition ("circular references with
//! sibling keys are not supported"); it also refuses `patternProperties` whose patterns may
//! match the same name. Without `strict` (OpenAI's semantics: the model tries to follow the
//! schema) the grammar leaves out, one step at a time, the least it must for the rest to
//! compile, and the output is checked against the whole schema after decoding, as for any
//! keyword a grammar cannot enforce.
//!
//! llguidance's refusals are text, not typed errors, so a step is chosen by the refusal's
//! wording; a wording this does not know leaves the refusal standing.

use serde_json::{Map, Value};

use super::schema_walk::for_each_schema;

/// What llguidance says when it cannot expand a reference it is inside of.
const CIRCULAR: &str = "circular references with sibling keys are not supported: ";
/// Other refusals of a structure that leaving keywords out can resolve.
const STRUCTURAL: [&str; 3] = [CIRCULAR, "are not disjoint", "Schema intersection stack level exceeded"];

/// Keywords that constrain nothing: they stay where keywords beside a reference are left out.
const ANNOTATIONS: [&str; 14] = [
    "$schema",
    "$id",
    "id",
    "$comment",
    "$anchor",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "definitions",
    "$defs",
];
const APPLICATORS: [&str; 3] = ["allOf", "anyOf", "oneOf"];

/// A rewrite that leaves part of a schema out, naming what; empty when it found nothing.
type Step<'a> = Box<dyn Fn(&mut Value) -> Vec<String> + 'a>;

/// One step: rewrites `schema` so that the structure `refusal` names may compile and names
/// what the grammar no longer enforces; empty when no step applies (the refusal stands).
/// Steps go from the reference the refusal names to every reference, so a schema loses only
/// as much as its refusals ask for.
pub(super) fn relax(schema: &mut Value, refusal: &str) -> Vec<String> {
    if !STRUCTURAL.iter().any(|s| refusal.contains(s)) {
        return Vec::new();
    }
    let named = refusal.split_once(CIRCULAR).map(|(_, rest)| fragment(rest));
    let mut steps: Vec<Step<'_>> = Vec::new();
    if let Some(target) = named {
        steps.push(Box::new(move |s| keep_only_the_reference_in_all_of(s, Some(target))));
        steps.push(Box::new(move |s| drop_beside_references(s, Some(target))));
        steps.push(Box::new(move |s| drop_beside_applicators(s, Some(target))));
        steps.push(Box::new(|s| drop_beside_applicators(s, None)));
        steps.push(Box::new(|s| keep_only_the_reference_in_all_of(s, None)));
    }
    steps.push(Box::new(drop_shared_pattern_properties));
    steps.push(Box::new(|s| drop_beside_references(s, None)));
    // A step that finds nothing to leave out changes nothing; the first that does is this one.
    steps.iter().map(|step| step(schema)).find(|left_out| !left_out.is_empty()).unwrap_or_default()
}

/// The JSON pointer of a reference as llguidance names it (`json-schema:///#/definitions/a`,
/// `https://x/s.json#/definitions/a`, or a document's root): what follows its `#`.
fn fragment(uri: &str) -> &str {
    let uri = uri.split_whitespace().next().unwrap_or("");
    uri.split_once('#').map_or("", |(_, f)| f)
}

/// The reference `schema` is, when it refers to `target` (a fragment; any when `None`).
fn refers_to(schema: &Map<String, Value>, target: Option<&str>) -> Option<String> {
    let r = schema.get("$ref")?.as_str()?;
    let matches = target.is_none_or(|t| r.split_once('#').is_some_and(|(_, f)| f == t));
    matches.then(|| r.to_string())
}

/// An `allOf` with a branch that refers to `target` keeps that branch alone.
fn keep_only_the_reference_in_all_of(schema: &mut Value, target: Option<&str>) -> Vec<String> {
    let mut left_out = Vec::new();
    for_each_schema(schema, &mut |s| {
        let Some(Value::Array(branches)) = s.get_mut("allOf") else { return };
        if branches.len() < 2 {
            return;
        }
        let Some((i, r)) = branches.iter().enumerate().find_map(|(i, b)| Some((i, branch_refers_to(b, target)?)))
        else {
            return;
        };
        let kept = branches.swap_remove(i);
        left_out.push(format!(
            "allOf: {} branch(es) beside $ref {r:?} cannot be enforced by a grammar (a recursive reference); checked after decoding",
            branches.len()
        ));
        *branches = vec![kept];
    });
    left_out
}

/// The reference a branch of an applicator is, when it refers to `target`.
fn branch_refers_to(branch: &Value, target: Option<&str>) -> Option<String> {
    branch.as_object().and_then(|b| refers_to(b, target))
}

/// A reference to `target` loses the keywords beside it that constrain.
fn drop_beside_references(schema: &mut Value, target: Option<&str>) -> Vec<String> {
    let mut left_out = Vec::new();
    for_each_schema(schema, &mut |s| {
        let Some(r) = refers_to(s, target) else { return };
        let dropped = drop_keys(s, |k| k != "$ref" && !ANNOTATIONS.contains(&k));
        if !dropped.is_empty() {
            left_out.push(format!(
                "{dropped:?} beside $ref {r:?} cannot be enforced by a grammar (a recursive reference); checked after decoding"
            ));
        }
    });
    left_out
}

/// A schema with an `allOf`/`anyOf`/`oneOf` branch that refers to `target` loses the keywords
/// beside the applicator that constrain (each branch is intersected with them).
fn drop_beside_applicators(schema: &mut Value, target: Option<&str>) -> Vec<String> {
    let mut left_out = Vec::new();
    for_each_schema(schema, &mut |s| {
        let reference = APPLICATORS.iter().find_map(|a| match s.get(*a) {
            Some(Value::Array(branches)) => branches.iter().find_map(|b| branch_refers_to(b, target)),
            _ => None,
        });
        let Some(r) = reference else { return };
        let dropped = drop_keys(s, |k| !APPLICATORS.contains(&k) && !ANNOTATIONS.contains(&k));
        if !dropped.is_empty() {
            left_out.push(format!(
                "{dropped:?} beside a branch with $ref {r:?} cannot be enforced by a grammar (a recursive reference); checked after decoding"
            ));
        }
    });
    left_out
}

/// `patternProperties` that may match a name another pattern or a listed property matches
/// go, and so does `additionalProperties` beside them (without the patterns it would forbid
/// the names they allowed).
fn drop_shared_pattern_properties(schema: &mut Value) -> Vec<String> {
    let mut left_out = Vec::new();
    for_each_schema(schema, &mut |s| {
        let shared = match s.get("patternProperties") {
            Some(Value::Object(p)) => p.len() > 1 || (!p.is_empty() && s.contains_key("properties")),
            _ => false,
        };
        if shared {
            let dropped = drop_keys(s, |k| k == "patternProperties" || k == "additionalProperties");
            left_out.push(format!(
                "{dropped:?} (patterns that may match the same names) cannot be enforced by a grammar; checked after decoding"
            ));
        }
    });
    left_out
}

/// Removes the keys `drop` selects, naming them in order.
fn drop_keys(s: &mut Map<String, Value>, drop: impl Fn(&str) -> bool) -> Vec<String> {
    let keys: Vec<String> = s.keys().filter(|k| drop(k)).cloned().collect();
    keys.iter().for_each(|k| {
        s.remove(k);
    });
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const REFUSED_FOO: &str =
        "circular references with sibling keys are not supported: json-schema:///#/definitions/Foo";

    #[test]
    fn the_named_references_all_of_keeps_the_reference_first() {
        let mut schema = json!({
            "definitions": {
                "Child": {"type": "object"},
                "Foo": {"properties": {"kids": {"allOf": [{"$ref": "#/definitions/Child"}, {"$ref": "#/definitions/Foo"}]}}},
                "Bar": {"allOf": [{"$ref": "#/definitions/Child"}, {"required": ["x"]}]}
            },
            "properties": {"foo": {"$ref": "#/definitions/Foo", "type": "object"}}
        });
        let left_out = relax(&mut schema, REFUSED_FOO);
        assert_eq!(left_out.len(), 1, "{left_out:?}");
        assert_eq!(schema["definitions"]["Foo"]["properties"]["kids"]["allOf"], json!([{"$ref": "#/definitions/Foo"}]));
        // Nothing else changes in this step: not the other allOf, not the keywords beside the $ref.
        assert_eq!(schema["definitions"]["Bar"]["allOf"].as_array().map(Vec::len), Some(2));
        assert_eq!(schema["properties"]["foo"]["type"], json!("object"));
        // The next step takes the keywords beside the named reference, annotations staying.
        let left_out = relax(&mut schema, REFUSED_FOO);
        assert!(left_out.len() == 1 && left_out[0].contains("type"), "{left_out:?}");
        assert_eq!(schema["properties"]["foo"], json!({"$ref": "#/definitions/Foo"}));
    }

    #[test]
    fn keywords_beside_an_applicator_of_references_go_then_shared_patterns_then_every_sibling() {
        let mut schema = json!({
            "description": "kept",
            "type": "object",
            "anyOf": [{"$ref": "#/definitions/Foo"}, {"type": "null"}],
            "definitions": {"Foo": {"patternProperties": {"a": {}, "b": {}}, "additionalProperties": false}}
        });
        let left_out = relax(&mut schema, REFUSED_FOO);
        assert!(left_out.len() == 1 && left_out[0].contains("\"type\""), "{left_out:?}");
        assert_eq!(schema["description"], json!("kept"));
        assert!(schema.get("type").is_none() && schema.get("anyOf").is_some());
        let left_out = relax(&mut schema, "patternProperty regexes /a/ and /b/ are not disjoint");
        assert!(left_out.len() == 1 && left_out[0].contains("patternProperties"), "{left_out:?}");
        assert_eq!(schema["definitions"]["Foo"], json!({}));
        // Nothing left that a step could take: the refusal stands.
        assert!(relax(&mut schema, REFUSED_FOO).is_empty());
    }

    #[test]
    fn other_refusals_and_properties_named_like_keywords_are_left_alone() {
        let mut schema = json!({"properties": {"$ref": {"type": "string"}, "x": {"$ref": "#/a", "minLength": 1}}});
        let before = schema.clone();
        assert!(relax(&mut schema, "Unsatisfiable schema").is_empty());
        assert!(relax(&mut schema, "Unimplemented keys: [\"not\"]").is_empty());
        assert_eq!(schema, before);
        // A reference elsewhere than the one named is left for the last step.
        let left_out = relax(&mut schema, REFUSED_FOO);
        assert!(left_out.len() == 1 && left_out[0].contains("minLength"), "{left_out:?}");
        assert_eq!(schema["properties"]["$ref"], json!({"type": "string"}), "a property named $ref is a property");
    }

    #[test]
    fn the_named_fragment_is_what_follows_the_hash() {
        assert_eq!(fragment("https://json.schemastore.org/x.json#/definitions/env"), "/definitions/env");
        assert_eq!(fragment("json-schema:///#"), "");
        assert_eq!(fragment("no-hash"), "");
    }
}
