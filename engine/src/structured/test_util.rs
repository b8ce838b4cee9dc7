//! Shared fixtures for the structured-output tests: the SmolLM2 GGUF's tokenizer, a backend
//! over it, and a seeded RNG.

use std::path::PathBuf;
use std::sync::OnceLock;

use entrobatch_model_runner::Tokenizer;
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

use super::{Constraint, GrammarLimits, StructuredBackend, StructuredOutput};

pub(super) const SMOLLM2_VOCAB: usize = 49152;

/// The SmolLM2 tokenizer, or `None` (with a note) when the model file is absent, in which
/// case the calling test skips, as the model_runner tests do.
pub(super) fn tokenizer() -> Option<&'static Tokenizer> {
    static TOK: OnceLock<Option<Tokenizer>> = OnceLock::new();
    TOK.get_or_init(|| {
        let path =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("models").join("SmolLM2-135M-Instruct.Q4_1.gguf");
        if !path.exists() {
            eprintln!("SKIP: model file {} not found", path.display());
            return None;
        }
        let mut f = std::fs::File::open(&path).expect("open GGUF");
        let content = candle_core::quantized::gguf_file::Content::read(&mut f).expect("read GGUF header");
        Some(Tokenizer::from_gguf(&content).expect("tokenizer from GGUF"))
    })
    .as_ref()
}

/// A backend whose logits rows are exactly the tokenizer's size.
pub(super) fn backend() -> Option<&'static StructuredBackend> {
    static BACKEND: OnceLock<Option<StructuredBackend>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            let tok = tokenizer()?;
            Some(StructuredBackend::new(tok, tok.vocab_size, GrammarLimits::default()).expect("backend"))
        })
        .as_ref()
}

pub(super) fn compile(spec: &StructuredOutput) -> Constraint {
    let b = backend().expect("backend");
    match b.compile(spec) {
        Ok(c) => c,
        Err(e) => panic!("compiling {spec:?}: {e}"),
    }
}

/// Seeded choices for the random grammar walks.
pub(super) struct Rng(SplitMix64);

impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Self(SplitMix64::seed_from_u64(seed))
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.0.next_u64() % n as u64) as usize
    }
}

/// Scans JSON text: `(ends inside a string literal, whitespace seen outside strings)`.
fn scan_json(text: &str) -> (bool, bool) {
    let mut in_str = false;
    let mut escaped = false;
    let mut loose_ws = false;
    for c in text.chars() {
        if in_str {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
        } else if c == '"' {
            in_str = true;
        } else if c.is_whitespace() {
            loose_ws = true;
        }
    }
    (in_str, loose_ws)
}

/// JSON text has no whitespace outside string literals (the compact option took effect).
pub(super) fn is_compact_json(text: &str) -> bool {
    !scan_json(text).1
}

/// A JSON prefix ends inside a string literal.
pub(super) fn in_string(prefix: &str) -> bool {
    scan_json(prefix).0
}
