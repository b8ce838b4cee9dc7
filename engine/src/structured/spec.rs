//! What a request asks for (travels inside `GenerationParams`) and the errors of the
//! structured-output path.

use serde_json::Value;

/// A constraint on the generated text.
///
/// Serialized externally tagged in snake_case: `"json_object"`, `{"json_schema": {..}}`, `{"strict_json_schema": {..}}`,
/// `{"regex": ".."}`, `{"choice": ["a", "b"]}`, `{"lark": ".."}`, `{"gbnf": ".."}`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutput {
    /// Any JSON object (OpenAI `response_format: {"type": "json_object"}`).
    JsonObject,
    /// A JSON Schema (OpenAI `response_format: {"type": "json_schema"}`), best effort as
    /// OpenAI has it without `strict`: every keyword a grammar can enforce is enforced, the
    /// others (`not`, `uniqueItems`, `if`/`then`, ...; `oneOf` becomes `anyOf`) are checked
    /// on the finished output by a JSON Schema validator, whose verdict comes with the
    /// `Finished` event.
    JsonSchema(Value),
    /// A JSON Schema with OpenAI's `strict: true`: a keyword the grammar cannot enforce is
    /// refused ([`StructuredError::InvalidSchema`] naming it), and so is a `oneOf` whose branches
    /// cannot be shown disjoint; a disjoint one is decoded as `anyOf`
    /// and the output checked, as above.
    StrictJsonSchema(Value),
    /// A regular expression (Rust `regex` syntax) the whole output must match.
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// A grammar in llguidance's Lark dialect (what vLLM-style `grammar` takes).
    Lark(String),
    /// A grammar in llama.cpp's GBNF (llama-server's `grammar`); its `root` rule is matched.
    Gbnf(String),
}

impl StructuredOutput {
    /// Short name of the variant, for logs and error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            StructuredOutput::JsonObject => "json_object",
            StructuredOutput::JsonSchema(_) => "json_schema",
            StructuredOutput::StrictJsonSchema(_) => "strict_json_schema",
            StructuredOutput::Regex(_) => "regex",
            StructuredOutput::Choice(_) => "choice",
            StructuredOutput::Lark(_) => "lark",
            StructuredOutput::Gbnf(_) => "gbnf",
        }
    }

    /// Wraps a compile error from llguidance in the variant that names what was wrong.
    pub(crate) fn compile_error(&self, msg: String) -> StructuredError {
        match self {
            StructuredOutput::JsonObject | StructuredOutput::JsonSchema(_) | StructuredOutput::StrictJsonSchema(_) => {
                StructuredError::InvalidSchema(msg)
            }
            StructuredOutput::Regex(_) => StructuredError::InvalidRegex(msg),
            StructuredOutput::Choice(_) | StructuredOutput::Lark(_) | StructuredOutput::Gbnf(_) => {
                StructuredError::InvalidGrammar(msg)
            }
        }
    }
}

/// Errors of structured outputs. The `Invalid*`, `EmptyChoice`, `TooLarge` and
/// `CompileTimeout` variants are the client's fault (HTTP 400, see
/// [`StructuredError::is_client_error`]); `CompilerBusy` is load; the rest are the engine's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StructuredError {
    /// The JSON schema is malformed, unsatisfiable, or uses a feature llguidance does not
    /// implement (it refuses rather than silently ignore a constraint).
    #[error("invalid or unsupported JSON schema: {0}")]
    InvalidSchema(String),
    #[error("invalid or unsupported regex: {0}")]
    InvalidRegex(String),
    #[error("invalid grammar: {0}")]
    InvalidGrammar(String),
    #[error("`choice` must list at least one string")]
    EmptyChoice,
    /// Over `GrammarLimits::max_spec_bytes`, refused before any work.
    #[error("the {kind} is {bytes} bytes, over the limit of {limit} bytes (serve --max-grammar-bytes)")]
    TooLarge { kind: &'static str, bytes: usize, limit: usize },
    /// The compile ran past `GrammarLimits::compile_timeout`. It still finishes and is
    /// cached, so the same spec sent again is answered at once.
    #[error(
        "compiling the {kind} took longer than {limit_ms} ms (serve --grammar-compile-timeout-ms): \
         simplify it, or send it again once its compile has finished, which is then cached"
    )]
    CompileTimeout { kind: &'static str, limit_ms: u64 },
    /// Every compile slot stayed busy with other requests' grammars until the deadline:
    /// the engine's load, not the request (HTTP 429, retry).
    #[error("the grammar compiler was busy with other requests for {waited_ms} ms; retry")]
    CompilerBusy { waited_ms: u64 },
    /// A token that the constraint does not allow at this point was committed.
    #[error("token {token_id} rejected by the output constraint: {reason}")]
    Rejected { token_id: u32, reason: String },
    /// The model's tokenizer cannot drive llguidance (not byte-level BPE, no EOS, ...).
    #[error("structured outputs unsupported for this tokenizer: {0}")]
    UnsupportedTokenizer(String),
    /// llguidance failed while running a valid constraint (e.g. it exceeded its lexer or
    /// parser limits, or allows no token at all).
    #[error("structured output constraint failed: {0}")]
    Internal(String),
}

impl StructuredError {
    /// True when the request itself is at fault (answer 400, not 500).
    pub fn is_client_error(&self) -> bool {
        matches!(
            self,
            StructuredError::InvalidSchema(_)
                | StructuredError::InvalidRegex(_)
                | StructuredError::InvalidGrammar(_)
                | StructuredError::EmptyChoice
                | StructuredError::TooLarge { .. }
                | StructuredError::CompileTimeout { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serde_shape() {
        let cases = [
            (StructuredOutput::JsonObject, json!("json_object")),
            (StructuredOutput::JsonSchema(json!({"type": "integer"})), json!({"json_schema": {"type": "integer"}})),
            (StructuredOutput::Regex("a+".into()), json!({"regex": "a+"})),
            (StructuredOutput::Choice(vec!["x".into(), "y".into()]), json!({"choice": ["x", "y"]})),
            (StructuredOutput::Lark("start: \"a\"".into()), json!({"lark": "start: \"a\""})),
            (StructuredOutput::Gbnf("root ::= \"a\"".into()), json!({"gbnf": "root ::= \"a\""})),
        ];
        for (spec, want) in cases {
            assert_eq!(serde_json::to_value(&spec).unwrap(), want);
            let back: StructuredOutput = serde_json::from_value(want).unwrap();
            assert_eq!(back, spec);
        }
    }

    #[test]
    fn client_errors() {
        assert!(StructuredError::EmptyChoice.is_client_error());
        assert!(StructuredError::InvalidRegex("x".into()).is_client_error());
        assert!(!StructuredError::Internal("x".into()).is_client_error());
        let r = StructuredError::Rejected { token_id: 1, reason: "r".into() };
        assert!(!r.is_client_error());
    }
}
