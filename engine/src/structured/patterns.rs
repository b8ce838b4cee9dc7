//! Best effort for `pattern`s no grammar here can enforce. llguidance's regular expressions
//! have no lookarounds, backreferences or `$` before the end, and it refuses a schema holding
//! one. Without `strict` (OpenAI's semantics: the model tries to follow the schema) such a
//! pattern is left to the check after decoding, like any keyword a grammar cannot enforce.

use serde_json::Value;

use super::schema_walk::for_each_schema;

/// Removes every `pattern`, and every `patternProperties` entry, whose pattern `enforceable`
/// refuses, naming each in the returned list (only where they are keywords: see
/// `for_each_schema`).
pub(super) fn drop_patterns(schema: &mut Value, enforceable: &mut impl FnMut(&str) -> bool) -> Vec<String> {
    let mut dropped = Vec::new();
    for_each_schema(schema, &mut |s| {
        if let Some(Value::String(p)) = s.get("pattern") {
            if !enforceable(p) {
                dropped.push(format!("pattern {p:?} cannot be enforced by a grammar; checked after decoding"));
                s.remove("pattern");
            }
        }
        let Some(Value::Object(named)) = s.get_mut("patternProperties") else { return };
        let refused: Vec<String> = named.keys().filter(|p| !enforceable(p)).cloned().collect();
        if refused.is_empty() {
            return;
        }
        refused.iter().for_each(|p| {
            named.remove(p);
        });
        // Without those patterns `additionalProperties` would forbid the names they allowed.
        let also = if s.remove("additionalProperties").is_some() { " (and additionalProperties)" } else { "" };
        dropped.push(format!(
            "patternProperties {refused:?}{also} cannot be enforced by a grammar; checked after decoding"
        ));
    });
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_rejected_patterns_go_and_data_stays() {
        let mut schema = json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "pattern": "^(?!x).*$"},
                "id": {"type": "string", "pattern": "^[a-z]+$"},
                "tags": {"type": "array", "items": {"pattern": "(a)\\1"}}
            },
            "default": {"pattern": "(?=kept)"},
            "$defs": {"d": {"pattern": "(?<=y)"}}
        });
        let dropped = drop_patterns(&mut schema, &mut |p: &str| !p.contains("(?") && !p.contains('\\'));
        assert_eq!(dropped.len(), 3, "{dropped:?}");
        assert!(schema["properties"]["pattern"].get("pattern").is_none(), "{schema}");
        assert_eq!(schema["properties"]["pattern"]["type"], json!("string"), "the property named pattern stays");
        assert_eq!(schema["properties"]["id"]["pattern"], json!("^[a-z]+$"));
        assert!(schema["properties"]["tags"]["items"].get("pattern").is_none());
        assert_eq!(schema["default"], json!({"pattern": "(?=kept)"}));
        assert!(schema["$defs"]["d"].get("pattern").is_none());
    }

    #[test]
    fn refused_pattern_properties_go_with_the_additional_properties_beside_them() {
        let mut schema = json!({
            "patternProperties": {"^(?!x)": {"type": "string"}, "^n_": {"type": "integer"}},
            "additionalProperties": false,
            "properties": {"patternProperties": {"type": "object"}}
        });
        let dropped = drop_patterns(&mut schema, &mut |p: &str| !p.contains("(?"));
        assert!(dropped.len() == 1 && dropped[0].contains("additionalProperties"), "{dropped:?}");
        assert_eq!(schema["patternProperties"], json!({"^n_": {"type": "integer"}}));
        assert!(schema.get("additionalProperties").is_none());
        assert_eq!(schema["properties"]["patternProperties"], json!({"type": "object"}), "a property, not the keyword");
    }
}
