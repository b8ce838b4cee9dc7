//! Per-model llguidance state: the token trie and the grammar compiler (`ParserFactory`),
//! built once and shared by every request's [`Constraint`].

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use entrobatch_model_runner::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::{JsonCompileOptions, Matcher, ParserFactory};
use serde_json::{json, Value};
use toktrie::{TokEnv, TokenizerEnv};

use super::constraint::{clean, Constraint, SchemaCheck};
use super::gbnf::gbnf_to_lark;
use super::limits::{CompileSlots, GrammarLimits};
use super::negation::rewrite_negated_required;
use super::patterns::drop_patterns;
use super::relax::relax;
use super::schema_walk::for_each_schema;
use super::spec::{StructuredError, StructuredOutput};
use super::vocab::GgufTokEnv;

/// Compiles [`StructuredOutput`] specs for one model. Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct StructuredBackend {
    inner: Arc<Inner>,
}

struct Inner {
    factory: ParserFactory,
    vocab_size: usize,
    eos_token_ids: Arc<[u32]>,
    cache: Mutex<GrammarCache>,
    /// Grammars compiled (cache misses), for tests and logs.
    compiled: AtomicU64,
    limits: GrammarLimits,
    slots: Arc<CompileSlots>,
}

/// How many compiled grammars are kept. An agent sends the same schema or tool list every
/// turn; a handful of such clients at once fit comfortably.
const GRAMMAR_CACHE_ENTRIES: usize = 64;

/// Compiled grammars at their start state, keyed by the spec's JSON, least recently used
/// evicted first. A hit is forked, never advanced.
#[derive(Default)]
struct GrammarCache {
    entries: HashMap<String, (Constraint, u64)>,
    clock: u64,
}

impl GrammarCache {
    fn fork(&mut self, key: &str) -> Option<Constraint> {
        self.clock += 1;
        let (template, used) = self.entries.get_mut(key)?;
        *used = self.clock;
        Some(template.fork())
    }

    fn insert(&mut self, key: String, template: Constraint) {
        if self.entries.len() >= GRAMMAR_CACHE_ENTRIES && !self.entries.contains_key(&key) {
            let oldest = self.entries.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        self.clock += 1;
        self.entries.insert(key, (template, self.clock));
    }
}

impl std::fmt::Debug for StructuredBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StructuredBackend")
            .field("vocab_size", &self.inner.vocab_size)
            .field("eos_token_ids", &self.inner.eos_token_ids)
            .finish_non_exhaustive()
    }
}

impl StructuredBackend {
    /// `vocab_size` = length of a logits row (may exceed the tokenizer's token count, e.g.
    /// Qwen2.5 151936 vs 151665): ids past the tokenizer are never allowed.
    pub fn new(tokenizer: &Tokenizer, vocab_size: usize, limits: GrammarLimits) -> Result<Self, StructuredError> {
        let env = GgufTokEnv::new(tokenizer, vocab_size)?;
        let eos_token_ids: Arc<[u32]> = env.tok_trie().eos_tokens().into();
        let tok_env: TokEnv = Arc::new(env);
        let mut factory = ParserFactory::new_simple(&tok_env)
            .map_err(|e| StructuredError::Internal(format!("llguidance setup: {e}")))?;
        // llguidance prints grammar warnings to stderr by default; they are logged through
        // tracing in `compile` instead.
        factory.quiet();
        // Verbose errors append the parser state (all text generated so far) and a dump of the
        // grammar to every runtime error: too much for a client-facing message or a log line.
        factory.limits_mut().verbose_errors = false;
        let inner = Inner {
            factory,
            vocab_size,
            eos_token_ids,
            cache: Mutex::new(GrammarCache::default()),
            compiled: AtomicU64::new(0),
            limits,
            slots: Arc::default(),
        };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// Length of the masks this backend produces (the logits row length).
    pub fn vocab_size(&self) -> usize {
        self.inner.vocab_size
    }

    /// Ids that end the output; a mask allows them all exactly when the grammar may end.
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.inner.eos_token_ids
    }

    /// Validates and compiles; an invalid or unsupported schema/regex/grammar is an error
    /// naming the problem (the HTTP 400 path), and so is one over the [`GrammarLimits`]. Never
    /// panics: llguidance panics are caught and reported as errors. A spec compiled before
    /// is forked from the cache instead.
    pub fn compile(&self, spec: &StructuredOutput) -> Result<Constraint, StructuredError> {
        let key = serde_json::to_string(spec).map_err(|e| StructuredError::Internal(format!("spec key: {e}")))?;
        let limits = self.inner.limits;
        limits.check_size(spec.kind(), key.len())?;
        if let Some(hit) = self.cache().fork(&key) {
            return Ok(hit);
        }
        let deadline = std::time::Instant::now() + limits.compile_timeout;
        let slot = self.inner.slots.acquire(limits.max_concurrent_compiles, deadline, limits.compile_timeout)?;
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        let backend = self.clone();
        let owned = spec.clone();
        std::thread::Builder::new()
            .name("grammar-compile".into())
            .spawn(move || {
                let _slot = slot;
                // The receiver is gone when the deadline passed; the grammar is cached anyway.
                let _ = answer.send(backend.compile_into_cache(&owned, key));
            })
            .map_err(|e| StructuredError::Internal(format!("cannot start a grammar compile: {e}")))?;
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match answered.recv_timeout(left) {
            Ok(compiled) => compiled,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(StructuredError::CompileTimeout {
                kind: spec.kind(),
                limit_ms: limits.compile_timeout.as_millis() as u64,
            }),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Err(StructuredError::Internal("the grammar compile ended without an answer".into()))
            }
        }
    }

    /// Compiles `spec`, keeps its start state in the cache under `key`, returns a fork.
    fn compile_into_cache(&self, spec: &StructuredOutput, key: String) -> Result<Constraint, StructuredError> {
        let started = std::time::Instant::now();
        let template = self.compile_uncached(spec)?;
        tracing::debug!(kind = spec.kind(), bytes = key.len(), elapsed = ?started.elapsed(), "grammar compiled");
        let constraint = template.fork();
        self.cache().insert(key, template);
        // Counted once cached, so a caller that sees the count can count on the hit.
        self.inner.compiled.fetch_add(1, Ordering::Relaxed);
        Ok(constraint)
    }

    /// Grammars compiled so far (specs not found in the cache).
    pub fn grammars_compiled(&self) -> u64 {
        self.inner.compiled.load(Ordering::Relaxed)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, GrammarCache> {
        // A panic while holding the lock cannot leave the map half-updated in a way that
        // matters: entries are whole values.
        self.inner.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn compile_uncached(&self, spec: &StructuredOutput) -> Result<Constraint, StructuredError> {
        let refused = match self.compile_once(spec, Vec::new()) {
            Err(StructuredError::InvalidSchema(e)) => e,
            other => return other,
        };
        // Best effort: a `pattern` llguidance cannot compile, then the keywords of a structure
        // it refuses (`relax`), are left to the check after, a step at a time. If nothing
        // more can be left out, the first refusal is the answer: it names the real problem.
        let StructuredOutput::JsonSchema(schema) = spec else { return Err(StructuredError::InvalidSchema(refused)) };
        let mut relaxed = schema.clone();
        let mut unenforced = drop_patterns(&mut relaxed, &mut |p: &str| self.pattern_compiles(p));
        let (mut refusal, mut changed) = (refused.clone(), !unenforced.is_empty());
        for _ in 0..MAX_RELAXATIONS {
            if !changed {
                let more = relax(&mut relaxed, &refusal);
                if more.is_empty() {
                    break;
                }
                unenforced.extend(more);
            }
            match self.compile_once(&StructuredOutput::JsonSchema(relaxed.clone()), unenforced.clone()) {
                Ok(mut constraint) => {
                    constraint.recheck_against(schema)?;
                    return Ok(constraint);
                }
                Err(StructuredError::InvalidSchema(e)) => (refusal, changed) = (e, false),
                Err(other) => return Err(other),
            }
        }
        Err(StructuredError::InvalidSchema(refused))
    }

    /// Whether llguidance compiles `pattern` as a JSON Schema string pattern.
    fn pattern_compiles(&self, pattern: &str) -> bool {
        let spec = StructuredOutput::StrictJsonSchema(json!({"type": "string", "pattern": pattern}));
        to_grammar(&spec).is_ok_and(|grammar| {
            llguidance::panic_utils::catch_unwind(AssertUnwindSafe(|| self.inner.factory.create_parser(grammar)))
                .is_ok()
        })
    }

    /// One compile; `unenforced` names what the caller already left out of the grammar.
    fn compile_once(&self, spec: &StructuredOutput, unenforced: Vec<String>) -> Result<Constraint, StructuredError> {
        let grammar = to_grammar(spec)?;
        let factory = &self.inner.factory;
        // Matcher::new also starts the parser, outside llguidance's own panic guard.
        let built = llguidance::panic_utils::catch_unwind(AssertUnwindSafe(|| {
            let parser = factory.create_parser(grammar)?;
            Ok(Matcher::new(Ok(parser)))
        }));
        let mut matcher = built.map_err(|e| spec.compile_error(clean(e.to_string())))?;
        if let Some(e) = matcher.get_error() {
            return Err(spec.compile_error(clean(e)));
        }
        let mut warnings = unenforced;
        warnings.extend(matcher.grammar_warnings());
        for w in &warnings {
            tracing::debug!(kind = spec.kind(), "structured output grammar warning: {w}");
        }
        let check = match spec {
            StructuredOutput::JsonSchema(schema) | StructuredOutput::StrictJsonSchema(schema)
                if !warnings.is_empty() =>
            {
                Some(Arc::new(SchemaCheck::new(schema, warnings)?))
            }
            _ => None,
        };
        Ok(Constraint::new(matcher, self.inner.vocab_size, self.inner.eos_token_ids.clone()).with_check(check))
    }
}

// Shared by the request-admission path (compile) and the engine loop.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<StructuredBackend>();
};

/// The llguidance grammar for a spec.
fn to_grammar(spec: &StructuredOutput) -> Result<TopLevelGrammar, StructuredError> {
    Ok(match spec {
        StructuredOutput::JsonObject => {
            TopLevelGrammar::from_json_schema(compact_schema(json!({"type": "object"}), Strictness::Strict)?)
        }
        StructuredOutput::JsonSchema(schema) => {
            TopLevelGrammar::from_json_schema(compact_schema(schema.clone(), Strictness::BestEffort)?)
        }
        StructuredOutput::StrictJsonSchema(schema) => {
            TopLevelGrammar::from_json_schema(compact_schema(schema.clone(), Strictness::Strict)?)
        }
        StructuredOutput::Regex(rx) => {
            // regex_to_lark only rewrites text, but it is not ours: guard it too.
            let rx = rx.clone();
            llguidance::panic_utils::catch_unwind(AssertUnwindSafe(move || Ok(TopLevelGrammar::from_regex(&rx))))
                .map_err(|e| StructuredError::InvalidRegex(e.to_string()))?
        }
        StructuredOutput::Choice(options) => {
            if options.is_empty() {
                return Err(StructuredError::EmptyChoice);
            }
            TopLevelGrammar::from_lark(choice_grammar(options))
        }
        StructuredOutput::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
        StructuredOutput::Gbnf(g) => TopLevelGrammar::from_lark(gbnf_to_lark(g)?),
    })
}

/// Lark grammar matching exactly one of `options`. Lark string literals are JSON strings
/// (llguidance decodes them with serde_json), so JSON escaping quotes any text safely.
pub(crate) fn choice_grammar(options: &[String]) -> String {
    let alts: Vec<String> = options.iter().map(|o| Value::String(o.clone()).to_string()).collect();
    format!("start: {}\n", alts.join(" | "))
}

/// What a keyword the grammar cannot enforce does: refused, or left to the check after.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Strictness {
    Strict,
    BestEffort,
}

/// Compiles of a relaxed schema before best effort gives up: each one leaves more of the
/// schema to the check after, and each costs about what the first compile did.
const MAX_RELAXATIONS: usize = 8;

/// The schema with llguidance's JSON options set for compact output, no whitespace between
/// tokens, unless the client's `x-guidance` sets `whitespace_flexible` or `whitespace_pattern`.
/// llguidance's default allows any run of whitespace wherever JSON does, and a model sampled at
/// temperature 1 can then emit whitespace until max_tokens; whitespace bounded as llama.cpp's
/// JSON grammars bound it lets a small model spend its tokens on indentation and repeat itself
/// more often than the compact form does (BENCHMARKS.md, JSONSchemaBench). Other options a
/// client put in `x-guidance` (separators) are kept; `lenient` and `coerce_one_of` follow the
/// strictness.
fn compact_schema(schema: Value, strictness: Strictness) -> Result<Value, StructuredError> {
    let mut obj = match schema {
        Value::Object(o) => o,
        // `true` is the schema that accepts any JSON value.
        Value::Bool(true) => serde_json::Map::new(),
        Value::Bool(false) => return Err(StructuredError::InvalidSchema("the schema `false` accepts no value".into())),
        other => {
            return Err(StructuredError::InvalidSchema(format!(
                "a JSON schema must be an object or a boolean, got {other}"
            )))
        }
    };
    let client = obj.remove("x-guidance");
    let client_sets_whitespace = client
        .as_ref()
        .and_then(Value::as_object)
        .is_some_and(|o| o.contains_key("whitespace_flexible") || o.contains_key("whitespace_pattern"));
    let mut opts = match client {
        Some(v) => serde_json::from_value::<JsonCompileOptions>(v)
            .map_err(|e| StructuredError::InvalidSchema(format!("x-guidance: {e}")))?,
        None => JsonCompileOptions::default(),
    };
    if !client_sets_whitespace {
        opts.whitespace_flexible = false;
        opts.whitespace_pattern = None;
    }
    // A `oneOf` whose branches llguidance cannot prove disjoint: best effort decodes it as
    // `anyOf`, as llama.cpp and most grammar engines do, and the output is checked against the
    // real `oneOf` afterwards (llguidance warns, so a check is attached); strict refuses it,
    // as OpenAI's strict mode does, since a branch matched twice would be an invalid output.
    // Disjoint branches (a discriminated union) compile either way.
    opts.coerce_one_of = strictness == Strictness::BestEffort;
    opts.lenient = strictness == Strictness::BestEffort;
    let opts =
        serde_json::to_value(&opts).map_err(|e| StructuredError::Internal(format!("x-guidance options: {e}")))?;
    obj.insert("x-guidance".into(), opts);
    let mut schema = Value::Object(obj);
    drop_unknown_formats(&mut schema);
    rewrite_negated_required(&mut schema);
    Ok(schema)
}

/// The `format` values llguidance enforces (its `json/formats.rs`).
pub(super) const KNOWN_FORMATS: [&str; 10] =
    ["date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid", "uri"];

/// Removes `format` keywords naming a format llguidance does not know. From JSON Schema
/// 2019-09 on, `format` is an annotation unless a schema asks for the format-assertion
/// vocabulary, and an implementation must not fail on an unknown one; llguidance refuses the
/// schema instead. Known formats stay enforced (only where `format` is the keyword: see
/// `for_each_schema`).
fn drop_unknown_formats(schema: &mut Value) {
    for_each_schema(schema, &mut |s| {
        if s.get("format").and_then(Value::as_str).is_some_and(|f| !KNOWN_FORMATS.contains(&f)) {
            s.remove("format");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice_grammar_escapes() {
        let g = choice_grammar(&["a\"b".into(), "c\\d\n".into(), "".into()]);
        assert_eq!(g, "start: \"a\\\"b\" | \"c\\\\d\\n\" | \"\"\n");
    }

    #[test]
    fn json_is_compact_unless_the_client_sets_whitespace() {
        let s = compact_schema(json!({"type": "object", "x-guidance": {"item_separator": ", "}}), Strictness::Strict)
            .unwrap();
        let g = &s["x-guidance"];
        assert_eq!(g["whitespace_flexible"], json!(false));
        assert_eq!(g["whitespace_pattern"], Value::Null);
        assert_eq!(g["item_separator"], json!(", "), "the client's other options are kept");
        let s = compact_schema(json!({"x-guidance": {"whitespace_flexible": true}}), Strictness::Strict).unwrap();
        assert_eq!(s["x-guidance"]["whitespace_flexible"], json!(true));
        assert_eq!(s["x-guidance"]["whitespace_pattern"], Value::Null);
        let s = compact_schema(
            json!({
                "type": "object",
                "x-guidance": {"whitespace_flexible": false, "whitespace_pattern": " +", "lenient": true}
            }),
            Strictness::Strict,
        )
        .unwrap();
        let g = &s["x-guidance"];
        assert_eq!(g["whitespace_pattern"], json!(" +"), "the client's own whitespace is kept");
        assert_eq!(g["lenient"], json!(false), "strictness decides");
        assert_eq!(g["coerce_one_of"], json!(false), "strictness decides");
        assert_eq!(s["type"], json!("object"));
        assert!(matches!(compact_schema(json!(false), Strictness::Strict), Err(StructuredError::InvalidSchema(_))));
        assert!(matches!(compact_schema(json!(3), Strictness::Strict), Err(StructuredError::InvalidSchema(_))));
        assert!(matches!(
            compact_schema(json!({"x-guidance": {"bogus": 1}}), Strictness::Strict),
            Err(StructuredError::InvalidSchema(_))
        ));
        assert_eq!(compact_schema(json!(true), Strictness::BestEffort).unwrap().as_object().unwrap().len(), 1);
    }
}
