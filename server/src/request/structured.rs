//! The request forms of structured outputs, all mapped to one engine `StructuredOutput`:
//! OpenAI's `response_format`, vLLM's `structured_outputs` object and its older `guided_*`
//! fields, llama-server's top-level `json_schema` and GBNF `grammar` and its schema inside a
//! `json_object` format, so clients written for any of them work unchanged. At most one form per request.

use serde_json::Value;

use super::protocol::{unknown_key, StructuredFields};
use crate::response::error::ApiError;
use entrobatch::structured::{looks_like_gbnf, StructuredOutput};

/// The constraint the request asks for, or `None` for free text.
pub fn parse_structured(fields: &mut StructuredFields) -> Result<Option<StructuredOutput>, ApiError> {
    let mut found: Vec<(&'static str, StructuredOutput)> = Vec::new();
    if let Some(format) = fields.response_format.take() {
        if let Some(spec) = response_format(format)? {
            found.push(("response_format", spec));
        }
    }
    if let Some(outputs) = fields.structured_outputs.take() {
        if let Some(spec) = structured_outputs(outputs)? {
            found.push(("structured_outputs", spec));
        }
    }
    if let Some(schema) = fields.guided_json.take() {
        found.push(("guided_json", json_schema("guided_json", schema)?));
    }
    if let Some(schema) = fields.json_schema.take() {
        found.push(("json_schema", json_schema("json_schema", schema)?));
    }
    if let Some(regex) = fields.guided_regex.take() {
        found.push(("guided_regex", StructuredOutput::Regex(regex)));
    }
    if let Some(choice) = fields.guided_choice.take() {
        found.push(("guided_choice", StructuredOutput::Choice(choice)));
    }
    if let Some(grammar) = fields.guided_grammar.take() {
        found.push(("guided_grammar", grammar_spec(grammar)));
    }
    if let Some(grammar) = fields.grammar.take() {
        found.push(("grammar", StructuredOutput::Gbnf(grammar)));
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop().map(|(_, spec)| spec)),
        _ => {
            let names: Vec<&str> = found.iter().map(|(name, _)| *name).collect();
            Err(ApiError::invalid_param(
                found[1].0,
                format!("give one structured-output constraint per request, got {}", names.join(" and ")),
            ))
        }
    }
}

/// OpenAI's `response_format`: `text`, `json_object`, or `json_schema`; and llama-server's
/// `json_object` with a `schema` beside its `type`. Any other key is refused by its path.
fn response_format(format: Value) -> Result<Option<StructuredOutput>, ApiError> {
    let bad = |reason: String| ApiError::invalid_param("response_format", reason);
    let Value::Object(mut obj) = format else {
        return Err(bad("response_format must be an object with a `type`".into()));
    };
    let kind = obj.remove("type");
    let kind = match kind.as_ref() {
        Some(Value::String(kind)) => kind.as_str(),
        _ => return Err(bad("response_format needs a string `type`".into())),
    };
    let allowed: &[&str] = match kind {
        "text" => &[],
        "json_object" => &["schema"],
        "json_schema" => &["json_schema"],
        other => {
            return Err(bad(format!(
                "response_format type `{other}` is not supported (text, json_object or json_schema)"
            )))
        }
    };
    if let Some(key) = unknown_key(&obj, allowed) {
        let path = format!("response_format.{key}");
        return Err(ApiError::invalid_param(
            "response_format",
            format!("unknown key `{path}` for type `{kind}` (allowed: {})", allowed_list(allowed)),
        ));
    }
    match kind {
        "text" => Ok(None),
        "json_object" => match obj.remove("schema") {
            Some(schema) => json_schema("response_format", schema).map(Some),
            None => Ok(Some(StructuredOutput::JsonObject)),
        },
        _ => {
            let Some(Value::Object(mut spec)) = obj.remove("json_schema") else {
                return Err(bad("`json_schema` must be an object with a `schema` (and `name`, `strict`)".into()));
            };
            if let Some(key) = unknown_key(&spec, &["name", "schema", "strict", "description"]) {
                return Err(bad(format!("unknown key `response_format.json_schema.{key}`")));
            }
            let strict = match spec.remove("strict") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => b,
                Some(_) => return Err(bad("`response_format.json_schema.strict` must be a boolean".into())),
            };
            match spec.remove("schema") {
                Some(schema) if strict => {
                    schema_value("response_format", schema).map(|s| Some(StructuredOutput::StrictJsonSchema(s)))
                }
                Some(schema) => json_schema("response_format", schema).map(Some),
                // OpenAI allows a schema-less json_schema: any JSON object.
                None => Ok(Some(StructuredOutput::JsonObject)),
            }
        }
    }
}

fn allowed_list(keys: &[&str]) -> String {
    if keys.is_empty() {
        "only `type`".into()
    } else {
        keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
    }
}

/// vLLM's `structured_outputs`: exactly one of `json`, `regex`, `choice`, `grammar`,
/// `json_object`.
fn structured_outputs(value: Value) -> Result<Option<StructuredOutput>, ApiError> {
    let bad = |reason: String| ApiError::invalid_param("structured_outputs", reason);
    let Value::Object(obj) = value else {
        return Err(bad("structured_outputs must be an object".into()));
    };
    let mut found = Vec::new();
    for (key, v) in obj {
        let spec = match key.as_str() {
            "json" => json_schema("structured_outputs", v)?,
            "regex" => StructuredOutput::Regex(string(&key, v)?),
            "grammar" => grammar_spec(string(&key, v)?),
            "choice" => StructuredOutput::Choice(
                serde_json::from_value(v).map_err(|_| bad("`choice` must be a list of strings".into()))?,
            ),
            "json_object" => match v {
                Value::Bool(true) => StructuredOutput::JsonObject,
                Value::Bool(false) | Value::Null => continue,
                _ => return Err(bad("`json_object` must be a boolean".into())),
            },
            "disable_fallback" | "disable_any_whitespace" | "disable_additional_properties" | "whitespace_pattern" => {
                return Err(bad(format!("`{key}` is not supported")))
            }
            other => return Err(bad(format!("unknown key `{other}` (json, regex, choice, grammar or json_object)"))),
        };
        found.push(spec);
    }
    if found.len() > 1 {
        return Err(bad("give exactly one of json, regex, choice, grammar, json_object".into()));
    }
    Ok(found.pop())
}

/// vLLM's `grammar` takes GBNF-style EBNF or Lark, told apart by `::=`; so does this.
fn grammar_spec(grammar: String) -> StructuredOutput {
    if looks_like_gbnf(&grammar) {
        StructuredOutput::Gbnf(grammar)
    } else {
        StructuredOutput::Lark(grammar)
    }
}

/// A best-effort schema (OpenAI's default, without `strict`), given as `schema_value` reads it.
fn json_schema(field: &'static str, value: Value) -> Result<StructuredOutput, ApiError> {
    schema_value(field, value).map(StructuredOutput::JsonSchema)
}

/// A schema given as an object, or as a JSON string holding one (vLLM accepts both).
fn schema_value(field: &'static str, value: Value) -> Result<Value, ApiError> {
    let schema = match value {
        Value::String(text) => serde_json::from_str(&text)
            .map_err(|e| ApiError::invalid_param(field, format!("the JSON schema string does not parse: {e}")))?,
        v => v,
    };
    if !(schema.is_object() || schema.is_boolean()) {
        return Err(ApiError::invalid_param(field, "a JSON schema must be an object"));
    }
    Ok(schema)
}

fn string(key: &str, v: Value) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s),
        _ => Err(ApiError::invalid_param("structured_outputs", format!("`{key}` must be a string"))),
    }
}
