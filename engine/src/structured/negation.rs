//! The `not` that real schemas use most: properties that may not appear together
//! (`not: {required: [site, app]}`, OpenRTB's "a bid request has a site or an app, not both"),
//! or may not appear at all (`not: {anyOf: [{required: [a]}, {required: [b]}]}`). llguidance
//! implements no `not`, but each of these says which properties are absent, which it does
//! enforce (a property whose schema is `false` is never generated), so they are rewritten
//! into that, exactly, instead of being left to the check after decoding. Any other `not`
//! stays as it is.

use serde_json::{json, Map, Value};

use super::schema_walk::for_each_schema;

/// Rewrites stop where one `not` would become more alternatives than this: each is a copy of
/// the object's grammar.
const MAX_ALTERNATIVES: usize = 16;

/// Replaces every `not` of a `required` formula with the equivalent absence of properties,
/// appended to the schema's `allOf`.
pub(super) fn rewrite_negated_required(schema: &mut Value) {
    for_each_schema(schema, &mut |s| {
        let Some(groups) = s.get("not").and_then(required_groups) else { return };
        let malformed_all_of = s.get("allOf").is_some_and(|a| !a.is_array());
        if malformed_all_of || groups.iter().map(Vec::len).product::<usize>() > MAX_ALTERNATIVES {
            return;
        }
        s.remove("not");
        let absent = groups.iter().map(|group| not_all_of(group));
        // An `allOf` that is not a list is malformed, and its compile says so.
        if let Value::Array(all_of) = s.entry("allOf").or_insert_with(|| Value::Array(Vec::new())) {
            all_of.extend(absent);
        }
    });
}

/// The `not` operand as a disjunction of conjunctions of property names: `{required: S}` is one
/// group; `allOf` of `{required}` one group of all their names; `anyOf` of `{required}` one
/// group each. `None` for anything else, annotations aside.
fn required_groups(operand: &Value) -> Option<Vec<Vec<String>>> {
    let operand = operand.as_object()?;
    let (key, value) = only_keyword(operand)?;
    match key {
        "required" => Some(vec![names(value)?]),
        "allOf" => {
            let mut group = Vec::new();
            for branch in value.as_array()? {
                group.extend(names(required_only(branch)?)?);
            }
            Some(vec![group])
        }
        "anyOf" => value.as_array()?.iter().map(|branch| names(required_only(branch)?)).collect(),
        _ => None,
    }
    .filter(|groups: &Vec<Vec<String>>| !groups.is_empty() && groups.iter().all(|g| !g.is_empty()))
}

/// The one constraining keyword of `schema` (annotations aside).
fn only_keyword(schema: &Map<String, Value>) -> Option<(&str, &Value)> {
    let mut keywords = schema.iter().filter(|(k, _)| !matches!(k.as_str(), "description" | "title" | "$comment"));
    let (key, value) = keywords.next()?;
    keywords.next().is_none().then_some((key.as_str(), value))
}

/// `{required: [...]}` alone: its list.
fn required_only(schema: &Value) -> Option<&Value> {
    match only_keyword(schema.as_object()?)? {
        ("required", list) => Some(list),
        _ => None,
    }
}

fn names(list: &Value) -> Option<Vec<String>> {
    list.as_array()?.iter().map(|n| n.as_str().map(str::to_string)).collect()
}

/// Not every property of `group` present: an object lacking at least one of them. Exact for
/// values that are not objects too: `required` holds for them, so its negation fails them.
fn not_all_of(group: &[String]) -> Value {
    let lacking = |name: &String| json!({"type": "object", "properties": {name.clone(): false}});
    match group {
        [one] => lacking(one),
        many => json!({"anyOf": many.iter().map(lacking).collect::<Vec<_>>()}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_that_may_not_appear_together_become_alternatives_lacking_each() {
        let mut schema = json!({
            "type": "object",
            "properties": {"site": {"type": "object"}, "app": {"type": "object"}},
            "not": {"required": ["site", "app"]},
            "allOf": [{"required": ["id"]}],
        });
        rewrite_negated_required(&mut schema);
        assert_eq!(schema.get("not"), None);
        let lacking = |n: &str| json!({"type": "object", "properties": {n: false}});
        assert_eq!(schema["allOf"], json!([{"required": ["id"]}, {"anyOf": [lacking("site"), lacking("app")]}]));
        // The same through `allOf` of `required`, and inside a property's schema.
        let mut nested =
            json!({"properties": {"bid": {"not": {"allOf": [{"required": ["site"]}, {"required": ["app"]}]}}}});
        rewrite_negated_required(&mut nested);
        assert_eq!(nested["properties"]["bid"]["allOf"], json!([{"anyOf": [lacking("site"), lacking("app")]}]));
    }

    #[test]
    fn properties_that_may_not_appear_at_all_are_each_lacking() {
        let mut schema = json!({"not": {"anyOf": [{"required": ["a"]}, {"required": ["b", "c"], "description": "x"}]}});
        rewrite_negated_required(&mut schema);
        let lacking = |n: &str| json!({"type": "object", "properties": {n: false}});
        assert_eq!(schema, json!({"allOf": [lacking("a"), {"anyOf": [lacking("b"), lacking("c")]}]}));
    }

    #[test]
    fn any_other_not_is_left_alone() {
        for not in [
            json!({"type": "string"}),
            json!({"required": ["a"], "properties": {"a": {"const": 1}}}),
            json!({"anyOf": [{"required": ["a"]}, {"type": "null"}]}),
            json!({"required": []}),
            json!({"required": [1]}),
            json!({}),
        ] {
            let mut schema = json!({"not": not.clone()});
            rewrite_negated_required(&mut schema);
            assert_eq!(schema, json!({"not": not}));
        }
        // Five groups of two: 32 alternatives, too many copies of the object's grammar.
        let groups: Vec<Value> = (0..5).map(|i| json!({"required": [format!("a{i}"), format!("b{i}")]})).collect();
        let mut schema = json!({"not": {"anyOf": groups}});
        let before = schema.clone();
        rewrite_negated_required(&mut schema);
        assert_eq!(schema, before);
    }
}
