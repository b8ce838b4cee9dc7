//! Server-level generation defaults (vLLM's `--override-generation-config`): the sampling
//! values a request gets for the fields it does not send. A request's own value always wins.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GenerationDefaults {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f32>,
}

impl GenerationDefaults {
    /// Parses `--override-generation-config`; an unknown key is an error naming it.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Fills the request's unset fields (the same ones, by name) from the defaults.
    pub fn fill(&self, c: &mut super::protocol::CommonParams) {
        fn or<T: Copy>(field: &mut Option<T>, default: Option<T>) {
            if field.is_none() {
                *field = default;
            }
        }
        or(&mut c.temperature, self.temperature);
        or(&mut c.top_p, self.top_p);
        or(&mut c.top_k, self.top_k);
        or(&mut c.min_p, self.min_p);
        or(&mut c.seed, self.seed);
        or(&mut c.repetition_penalty, self.repetition_penalty);
        or(&mut c.presence_penalty, self.presence_penalty);
        or(&mut c.frequency_penalty, self.frequency_penalty);
        if c.max_tokens.is_none() && c.max_completion_tokens.is_none() {
            c.max_tokens = self.max_tokens;
        }
    }
}
