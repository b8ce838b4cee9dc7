//! Best effort for `pattern`s no grammar here can enforce. llguidance's regular expressions
//! have no lookarounds, backreferences or `$` before the end, and it refuses a schema holding
//! one. Without `strict` (OpenAI's semantics: the model tries to follow the schema) such a
//! pattern is left to the check after decoding, like any keyword a grammar cannot enforce.

use serde_json::Value;

/// Removes every `pattern` for which `enforceable` is false, naming each in the returned
/// list. Values that are data, not schemas (`const`, `enum`, `default`, `examples`), are left
/// alone, and a property named `pattern` is a property, not the keyword.
pub(super) fn drop_patterns(schema: &mut Value, enforceable: &mut impl FnMut(&str) -> bool) -> Vec<String> {
    let mut dropped = Vec::new();
    walk(schema, enforceable, &mut dropped);
    dropped
}

fn walk(value: &mut Value, enforceable: &mut impl FnMut(&str) -> bool, dropped: &mut Vec<String>) {
    match value {
        Value::Object(schema) => {
            if let Some(Value::String(p)) = schema.get("pattern") {
                if !enforceable(p) {
                    dropped.push(format!("pattern {p:?} cannot be enforced by a grammar; checked after decoding"));
                    schema.remove("pattern");
                }
            }
            for (key, child) in schema.iter_mut() {
                match key.as_str() {
                    "const" | "enum" | "default" | "examples" | "x-guidance" => {}
                    // Keys here are names, values are schemas.
                    "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                        if let Value::Object(named) = child {
                            named.values_mut().for_each(|s| walk(s, enforceable, dropped));
                        }
                    }
                    _ => walk(child, enforceable, dropped),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| walk(v, enforceable, dropped)),
        _ => {}
    }
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
}
