//! The request side: `tools` (OpenAI function tools) and `tool_choice`, checked up front so a
//! bad declaration is a 400 naming its field rather than a confused model.

use std::fmt;

use serde_json::{json, Value};

use crate::request::protocol::unknown_key;

/// One declared function tool.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments object; `{"type": "object"}` when the tool gave none
    /// (OpenAI: omitting `parameters` declares a function without a parameter list).
    pub parameters: Value,
    /// OpenAI's `strict`: the arguments must match `parameters`, also when the model chooses
    /// whether to call (`tool_choice: auto`), so a grammar is needed then too.
    pub strict: bool,
}

/// Why a `tools` entry was refused. [`field`](Self::field) is the JSON path of the culprit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolSpecError {
    NotAList,
    NotAnObject {
        index: usize,
    },
    /// `type` is missing or not `"function"` (the only kind of tool there is to call).
    BadType {
        index: usize,
        found: String,
    },
    MissingFunction {
        index: usize,
    },
    MissingName {
        index: usize,
    },
    /// OpenAI's rule: 1-64 of `a-z A-Z 0-9 _ -`. Templates also paste the name into JSON
    /// unescaped, so quotes or newlines would corrupt the prompt.
    BadName {
        index: usize,
        name: String,
    },
    DuplicateName {
        index: usize,
        name: String,
    },
    BadDescription {
        index: usize,
    },
    BadParameters {
        index: usize,
        reason: &'static str,
    },
    BadStrict {
        index: usize,
    },
    /// A key OpenAI's tool object does not have: refused rather than ignored. `path` is
    /// below the entry, e.g. `.function.strictness`.
    UnknownKey {
        index: usize,
        path: String,
    },
}

impl ToolSpecError {
    /// Where the problem is, e.g. `tools[1].function.name`.
    pub fn field(&self) -> String {
        use ToolSpecError::*;
        let (index, leaf) = match self {
            NotAList => return "tools".into(),
            NotAnObject { index } => (index, ""),
            BadType { index, .. } => (index, ".type"),
            MissingFunction { index } => (index, ".function"),
            MissingName { index } | BadName { index, .. } | DuplicateName { index, .. } => (index, ".function.name"),
            BadDescription { index } => (index, ".function.description"),
            BadParameters { index, .. } => (index, ".function.parameters"),
            BadStrict { index } => (index, ".function.strict"),
            UnknownKey { index, path } => return format!("tools[{index}]{path}"),
        };
        format!("tools[{index}]{leaf}")
    }
}

impl fmt::Display for ToolSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ToolSpecError::*;
        write!(f, "{}: ", self.field())?;
        match self {
            NotAList => f.write_str("must be a list of tools"),
            NotAnObject { .. } => f.write_str("must be an object"),
            BadType { found, .. } => write!(f, "must be \"function\" (got {found})"),
            MissingFunction { .. } => f.write_str("is required and must be an object"),
            MissingName { .. } => f.write_str("is required and must be a string"),
            BadName { name, .. } => {
                write!(f, "{name:?} must be 1-64 characters of a-z, A-Z, 0-9, underscores and dashes")
            }
            DuplicateName { name, .. } => write!(f, "{name:?} is declared twice"),
            BadDescription { .. } => f.write_str("must be a string"),
            BadParameters { reason, .. } => f.write_str(reason),
            BadStrict { .. } => f.write_str("must be a boolean"),
            UnknownKey { .. } => f.write_str("unknown key (a tool has `type` and `function`; a function `name`, `description`, `parameters` and `strict`)"),
        }
    }
}

impl std::error::Error for ToolSpecError {}

impl ToolSpec {
    /// The request's `tools` value.
    pub fn parse_list(tools: &Value) -> Result<Vec<ToolSpec>, ToolSpecError> {
        let list = tools.as_array().ok_or(ToolSpecError::NotAList)?;
        let mut specs: Vec<ToolSpec> = Vec::with_capacity(list.len());
        for (index, tool) in list.iter().enumerate() {
            let spec = Self::parse(index, tool)?;
            // Two tools of one name would make a call ambiguous.
            if specs.iter().any(|s| s.name == spec.name) {
                return Err(ToolSpecError::DuplicateName { index, name: spec.name });
            }
            specs.push(spec);
        }
        Ok(specs)
    }

    /// Entry `index` of `tools`: `{"type": "function", "function": {"name", "description"?,
    /// "parameters"?, "strict"?}}`; any other key is refused.
    pub fn parse(index: usize, tool: &Value) -> Result<ToolSpec, ToolSpecError> {
        let tool = tool.as_object().ok_or(ToolSpecError::NotAnObject { index })?;
        if let Some(key) = unknown_key(tool, &["type", "function"]) {
            return Err(ToolSpecError::UnknownKey { index, path: format!(".{key}") });
        }
        match tool.get("type") {
            Some(Value::String(t)) if t == "function" => {}
            other => {
                let found = other.map_or_else(|| "nothing".to_string(), Value::to_string);
                return Err(ToolSpecError::BadType { index, found });
            }
        }
        let function =
            tool.get("function").and_then(Value::as_object).ok_or(ToolSpecError::MissingFunction { index })?;
        if let Some(key) = unknown_key(function, &["name", "description", "parameters", "strict"]) {
            return Err(ToolSpecError::UnknownKey { index, path: format!(".function.{key}") });
        }
        let name = function.get("name").and_then(Value::as_str).ok_or(ToolSpecError::MissingName { index })?;
        let valid = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if name.is_empty() || name.len() > 64 || !name.chars().all(valid) {
            let name = name.to_string();
            return Err(ToolSpecError::BadName { index, name });
        }
        let description = match function.get("description") {
            None | Some(Value::Null) => None,
            Some(Value::String(d)) => Some(d.clone()),
            Some(_) => return Err(ToolSpecError::BadDescription { index }),
        };
        let parameters = match function.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object"}),
            Some(Value::Object(schema)) => {
                // Arguments are always an object; a schema for anything else cannot be met.
                match schema.get("type") {
                    None => {}
                    Some(Value::String(t)) if t == "object" => {}
                    Some(_) => {
                        let reason = "must be a JSON Schema of type \"object\"";
                        return Err(ToolSpecError::BadParameters { index, reason });
                    }
                }
                Value::Object(schema.clone())
            }
            Some(_) => {
                let reason = "must be a JSON Schema object";
                return Err(ToolSpecError::BadParameters { index, reason });
            }
        };
        let strict = match function.get("strict") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(ToolSpecError::BadStrict { index }),
        };
        Ok(ToolSpec { name: name.to_string(), description, parameters, strict })
    }
}

/// `tool_choice`: whether and which tool the model must call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    Function(String),
}

/// Why a `tool_choice` was refused (its field is always `tool_choice`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoiceError {
    /// A string other than `none`, `auto`, `required`.
    UnknownMode(String),
    /// Neither such a string nor `{"type": "function", "function": {"name": ...}}`.
    BadShape,
    /// Names a function that is not in `tools`.
    UnknownFunction(String),
    /// Asks for tools when the request declares none.
    NoTools,
}

impl fmt::Display for ToolChoiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tool_choice: ")?;
        match self {
            Self::UnknownMode(m) => {
                write!(f, "{m:?} is not one of \"none\", \"auto\", \"required\"")
            }
            Self::BadShape => f.write_str(
                "must be \"none\", \"auto\", \"required\" or \
                 {\"type\": \"function\", \"function\": {\"name\": ...}}",
            ),
            Self::UnknownFunction(n) => write!(f, "function {n:?} is not among the tools"),
            Self::NoTools => f.write_str("requires tools"),
        }
    }
}

impl std::error::Error for ToolChoiceError {}

impl ToolChoice {
    /// The request's `tool_choice`, checked against its `tools`. Absent (or null) means
    /// OpenAI's default: `auto` when tools are declared, `none` when not.
    pub fn parse(value: Option<&Value>, tools: &[ToolSpec]) -> Result<ToolChoice, ToolChoiceError> {
        let choice = match value {
            None | Some(Value::Null) if tools.is_empty() => return Ok(ToolChoice::None),
            None | Some(Value::Null) => return Ok(ToolChoice::Auto),
            Some(Value::String(s)) => match s.as_str() {
                "none" => return Ok(ToolChoice::None),
                "auto" => ToolChoice::Auto,
                "required" => ToolChoice::Required,
                other => return Err(ToolChoiceError::UnknownMode(other.to_string())),
            },
            Some(Value::Object(o)) => {
                let name = match (o.get("type"), o.get("function")) {
                    (Some(Value::String(t)), Some(Value::Object(f))) if t == "function" => {
                        f.get("name").and_then(Value::as_str)
                    }
                    _ => None,
                };
                let name = name.ok_or(ToolChoiceError::BadShape)?;
                if !tools.is_empty() && !tools.iter().any(|t| t.name == name) {
                    return Err(ToolChoiceError::UnknownFunction(name.to_string()));
                }
                ToolChoice::Function(name.to_string())
            }
            Some(_) => return Err(ToolChoiceError::BadShape),
        };
        if tools.is_empty() {
            return Err(ToolChoiceError::NoTools);
        }
        Ok(choice)
    }

    /// The tools this choice lets the model call: all of them but under `none`, or the one
    /// it names.
    pub fn allowed<'a>(&'a self, tools: &'a [ToolSpec]) -> impl Iterator<Item = &'a ToolSpec> + 'a {
        tools.iter().filter(move |t| match self {
            ToolChoice::None => false,
            ToolChoice::Auto | ToolChoice::Required => true,
            ToolChoice::Function(name) => &t.name == name,
        })
    }
}
