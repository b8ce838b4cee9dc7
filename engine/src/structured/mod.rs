//! Structured outputs (constrained decoding) with llguidance.
//!
//! - [`StructuredBackend`]: built once per model from its tokenizer (token trie + grammar
//!   compiler).
//! - [`StructuredBackend::compile`]: a request's [`StructuredOutput`] -> [`Constraint`];
//!   a bad schema/regex/grammar is a [`StructuredError`] for which
//!   [`is_client_error`](StructuredError::is_client_error) holds (HTTP 400); its size and
//!   compile time are bounded by [`GrammarLimits`].
//! - per step: [`Constraint::mask`] (a [`TokenMask`](entrobatch_sampler::TokenMask) the
//!   sampler applies) -> sample -> [`Constraint::commit`]; stop when
//!   [`Constraint::is_finished`] or an EOS id was committed.
//!
//! JSON grammars are compact unless the client's `x-guidance` asks for whitespace: outputs
//! are short and a sampled model cannot pad them with endless whitespace.

mod backend;
mod constraint;
mod gbnf;
mod limits;
mod negation;
mod patterns;
mod relax;
mod schema_walk;
mod spec;
mod vocab;

pub use backend::StructuredBackend;
pub use constraint::Constraint;
pub use gbnf::{gbnf_to_lark, looks_like_gbnf};
pub use limits::GrammarLimits;
pub use spec::{StructuredError, StructuredOutput};

#[cfg(test)]
mod test_util;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_gbnf;
#[cfg(test)]
mod tests_perf;
#[cfg(test)]
mod tests_walk;
