//! Tool calling (OpenAI `tools`): the tools and `tool_choice` a request declares, the JSON
//! Schema that forces a valid call, and finding the calls in what the model writes, whole or
//! streamed.
//!
//! A model family's call syntax is one [`ToolCallFormat`]: the texts a call may open with, and
//! a recogniser that decides, at such an opener, whether a call is there. Whole outputs
//! ([`ToolCallFormat::parse`]) and streams ([`ToolCallStream`]) share one left-to-right scan
//! ([`scan`]) whose decisions never depend on text after the span they cover, so a streamed
//! output splits into content and calls exactly as the same output parsed whole.

mod generic;
mod hermes;
mod json;
mod schema;
mod spec;
mod stream;
#[cfg(test)]
mod tests;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

pub use generic::{auto_grammar as generic_auto_grammar, rewrite as generic_rewrite};
pub use hermes::{strict_auto_grammar as hermes_strict_auto_grammar, HermesFormat};
pub use json::JsonFormat;
pub use schema::call_schema;
pub use spec::{ToolChoice, ToolSpec};
pub use stream::{ToolCallStream, ToolDelta};

/// A model output split into prose and calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Text outside the calls, trimmed; `None` when nothing but whitespace is left.
    pub content: Option<String>,
    pub calls: Vec<ParsedCall>,
}

/// One call of a declared tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedCall {
    pub name: String,
    /// Compact JSON text of an object (what OpenAI's `function.arguments` carries).
    pub arguments: String,
}

/// A format's verdict on the text starting at one of its openers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recognized {
    /// No call starts here; the scan moves on by one character.
    NotHere,
    /// The first `len` bytes are prose the scan must not look into (e.g. a JSON object that is
    /// not a call: calls nested in it are data, not calls).
    Content(usize),
    /// The first `len` bytes are these calls.
    Calls(usize, Vec<ParsedCall>),
    /// The text ends before the answer is known (only when `at_end` is false).
    Pending,
}

/// How one model family writes tool calls.
///
/// `recognize` must decide only from the text it has: any answer but [`Recognized::Pending`]
/// given with `at_end == false` must stay the same whatever text is appended. That is what
/// lets a stream send prose on before the output is complete.
pub trait ToolCallFormat: Send + Sync {
    /// Texts a call may begin with. The scan asks [`recognize`](Self::recognize) only where
    /// one of them starts, and holds a stream back while its text ends in a prefix of one.
    fn openers(&self) -> &[&'static str];

    /// `text` starts with one of [`openers`](Self::openers). `at_end`: no more text follows.
    fn recognize(&self, text: &str, tools: &[ToolSpec], at_end: bool) -> Recognized;

    /// Splits a finished output into content and calls of `tools`.
    fn parse(&self, text: &str, tools: &[ToolSpec]) -> Parsed {
        let mut parsed = Parsed::default();
        let mut content = String::new();
        for piece in scan(self, text, tools, true).0 {
            match piece {
                Piece::Content(t) => content.push_str(t),
                Piece::Calls(c) => parsed.calls.extend(c),
            }
        }
        let content = content.trim();
        parsed.content = (!content.is_empty()).then(|| content.to_string());
        parsed
    }
}

/// A decided stretch of output.
#[derive(Debug)]
pub(crate) enum Piece<'a> {
    Content(&'a str),
    Calls(Vec<ParsedCall>),
}

/// Splits `text` into decided pieces, in order, and returns them with the offset where the
/// undecided rest begins (`text.len()` when `at_end`, as everything is decided then).
pub(crate) fn scan<'a, F: ToolCallFormat + ?Sized>(
    format: &F,
    text: &'a str,
    tools: &[ToolSpec],
    at_end: bool,
) -> (Vec<Piece<'a>>, usize) {
    let openers = format.openers();
    let mut pieces = Vec::new();
    let (mut start, mut p) = (0, 0);
    let flush = |pieces: &mut Vec<Piece<'a>>, from: usize, to: usize| {
        if let Some(t) = text.get(from..to).filter(|t| !t.is_empty()) {
            pieces.push(Piece::Content(t));
        }
    };
    while let Some(rest) = text.get(p..).filter(|r| !r.is_empty()) {
        let one_char = rest.chars().next().map_or(1, char::len_utf8);
        // A length a format returns is trusted only if it lies inside `rest` on a character
        // boundary; anything else is treated as "not here", so the scan always progresses.
        let fits = |n: usize| n > 0 && rest.is_char_boundary(n);
        let step = if openers.iter().any(|o| !o.is_empty() && rest.starts_with(o)) {
            match format.recognize(rest, tools, at_end) {
                Recognized::Calls(n, calls) if fits(n) => {
                    flush(&mut pieces, start, p);
                    pieces.push(Piece::Calls(calls));
                    start = p + n;
                    n
                }
                Recognized::Content(n) if fits(n) => n,
                Recognized::Pending if !at_end => {
                    flush(&mut pieces, start, p);
                    return (pieces, p);
                }
                _ => one_char,
            }
        } else if !at_end && openers.iter().any(|o| o.starts_with(rest)) {
            // The text ends inside what may become an opener (`<tool_ca`): wait for more.
            flush(&mut pieces, start, p);
            return (pieces, p);
        } else {
            one_char
        };
        p += step;
    }
    flush(&mut pieces, start, text.len());
    (pieces, text.len())
}

/// A fresh OpenAI-style call id: `call_` and 24 letters/digits. Unique within the process
/// (a counter) and unpredictable across processes (std's randomly keyed SipHash over the
/// counter and the clock), without a random-number dependency.
pub fn new_call_id() -> String {
    const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let keys = RandomState::new();
    let mut id = String::from("call_");
    // 62^10 < 2^64: each hash yields 10 characters.
    for chunk in 0..3u8 {
        let mut h = keys.build_hasher();
        h.write_u64(n);
        h.write_u128(nanos);
        h.write_u8(chunk);
        let mut x = h.finish();
        for _ in 0..if chunk < 2 { 10 } else { 4 } {
            id.push(char::from(ALPHABET[(x % 62) as usize]));
            x /= 62;
        }
    }
    id
}
