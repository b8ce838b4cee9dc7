//! Which parts of a JSON schema are schemas: the one walk that the best-effort rewrites
//! (unknown formats, patterns, refused structures) share.

use serde_json::{Map, Value};

/// Calls `visit` on `value` and on every schema inside it, each before its children. Values
/// that are data, not schemas (`const`, `enum`, `default`, `examples`) and llguidance's own
/// options (`x-guidance`) are not entered, and the keys of `properties`, `patternProperties`,
/// `$defs`, `definitions` and `dependentSchemas` are names, so a property called `pattern`
/// or `$ref` is a property, not the keyword.
pub(super) fn for_each_schema(value: &mut Value, visit: &mut impl FnMut(&mut Map<String, Value>)) {
    match value {
        Value::Object(schema) => {
            visit(schema);
            for (key, child) in schema.iter_mut() {
                match key.as_str() {
                    "const" | "enum" | "default" | "examples" | "x-guidance" => {}
                    "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                        if let Value::Object(named) = child {
                            named.values_mut().for_each(|s| for_each_schema(s, visit));
                        }
                    }
                    _ => for_each_schema(child, visit),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| for_each_schema(v, visit)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_and_data_are_not_schemas() {
        let mut schema = json!({
            "properties": {"$ref": {"type": "string"}, "p": {"items": [{"type": "integer"}]}},
            "default": {"type": "data"},
            "enum": [{"type": "data"}],
            "$defs": {"d": {"anyOf": [{"type": "null"}]}}
        });
        let mut seen = Vec::new();
        for_each_schema(&mut schema, &mut |s| {
            if let Some(Value::String(t)) = s.get("type") {
                seen.push(t.clone());
            }
        });
        seen.sort();
        assert_eq!(seen, ["integer", "null", "string"]);
    }
}
