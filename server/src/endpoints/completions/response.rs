//! `/v1/completions` bodies: the whole response and the stream chunks (both
//! `object: "text_completion"`, as OpenAI sends them), and completions' logprobs layout.
//! Field order is wire order (see `crate::response`).

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use crate::response::{Envelope, TokenExtras};

/// `object: "text_completion"`.
pub type Completion = Envelope<CompletionChoice>;

/// Also `object: "text_completion"`, as OpenAI sends it.
pub type CompletionChunk = Envelope<CompletionChoice>;

#[derive(Debug, Serialize)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    /// `null` unless the request asked for logprobs.
    pub logprobs: Option<CompletionLogprobs>,
    /// `null` in every stream chunk but the closing one.
    pub finish_reason: Option<&'static str>,
    /// vLLM's `prompt_logprobs`: only when asked, on the choice that carries the prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<Vec<Option<PromptLogprobMap>>>,
    #[serde(flatten)]
    pub extras: TokenExtras,
}

/// One prompt position in vLLM's layout: `{"<token id>": {logprob, rank, decoded_token}}`,
/// the prompt's own token first, then the row's best.
#[derive(Debug, Default)]
pub struct PromptLogprobMap(Vec<(u32, PromptLogprobEntry)>);

#[derive(Debug, Serialize)]
pub struct PromptLogprobEntry {
    pub logprob: f64,
    pub rank: u32,
    pub decoded_token: String,
}

impl PromptLogprobMap {
    pub fn push(&mut self, (id, entry): (u32, PromptLogprobEntry)) {
        self.0.push((id, entry));
    }
}

impl Serialize for PromptLogprobMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (id, entry) in &self.0 {
            map.serialize_entry(&id.to_string(), entry)?;
        }
        map.end()
    }
}

/// Completions layout: parallel arrays; a token without logprobs is `null` in both
/// `token_logprobs` and `top_logprobs`.
#[derive(Debug, Default, Serialize)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<Option<f64>>,
    pub top_logprobs: Vec<Option<TopLogprobMap>>,
    pub text_offset: Vec<usize>,
}

/// `{token_text: logprob}`, in rank order. Two ids can decode to the same text (pieces of
/// one character both show as U+FFFD): a JSON object holds a key once, so the text keeps its
/// first place and takes the later logprob, as a map insert does.
#[derive(Debug, Default, PartialEq)]
pub struct TopLogprobMap(Vec<(String, f64)>);

impl TopLogprobMap {
    pub fn insert(&mut self, text: String, logprob: f64) {
        match self.0.iter_mut().find(|(t, _)| *t == text) {
            Some(entry) => entry.1 = logprob,
            None => self.0.push((text, logprob)),
        }
    }
}

impl FromIterator<(String, f64)> for TopLogprobMap {
    fn from_iter<I: IntoIterator<Item = (String, f64)>>(iter: I) -> Self {
        let mut map = Self::default();
        for (text, logprob) in iter {
            map.insert(text, logprob);
        }
        map
    }
}

impl Serialize for TopLogprobMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (text, logprob) in &self.0 {
            map.serialize_entry(text, logprob)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_text_keeps_its_first_place_and_the_later_logprob() {
        let map: TopLogprobMap =
            [("a".to_string(), -0.5), ("\u{fffd}".to_string(), -1.0), ("\u{fffd}".to_string(), -2.0)]
                .into_iter()
                .collect();
        assert_eq!(serde_json::to_string(&map).ok().as_deref(), Some(r#"{"a":-0.5,"�":-2.0}"#));
    }
}
