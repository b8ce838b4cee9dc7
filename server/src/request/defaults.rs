//! Server-level generation defaults: the sampling values a request gets for the fields it
//! does not send. They come from the checkpoint's own recommendations when asked
//! (`--generation-config auto`, vLLM's flag) and from `--override-generation-config`, which
//! wins over the checkpoint; a request's own value always wins over both.

use std::path::Path;

use serde::{Deserialize, Serialize};

use entrobatch::model_runner::{ModelError, RecommendedSampling};

/// `serve --generation-config`: whether the checkpoint's recommended sampling (GGUF
/// `general.sampling.*`, or `generation_config.json`) supplies defaults. `None`, the default,
/// keeps the engine's own defaults, whatever the file says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GenerationConfig {
    #[default]
    None,
    Auto,
}

impl std::str::FromStr for GenerationConfig {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Self::None),
            "auto" => Ok(Self::Auto),
            other => Err(format!("`{other}` is not one of auto, none")),
        }
    }
}

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

    /// The defaults in force: the checkpoint's recommendations at `model` (with
    /// [`GenerationConfig::Auto`]), each replaced by `overrides` where that sets the field.
    /// Logs what was chosen and where it came from.
    pub fn resolve(source: GenerationConfig, model: &Path, overrides: &Self) -> Result<Self, ModelError> {
        let from_model = match source {
            GenerationConfig::Auto => Self::from_recommended(&RecommendedSampling::read(model)?),
            GenerationConfig::None => Self::default(),
        };
        let in_force = from_model.clone().overridden_by(overrides);
        let json = |d: &Self| serde_json::to_string(d).unwrap_or_default();
        if source == GenerationConfig::Auto {
            tracing::info!("generation defaults recommended by {}: {}", model.display(), json(&from_model));
        }
        tracing::info!(
            "generation defaults in force (--generation-config {}, overrides {}): {}",
            if source == GenerationConfig::Auto { "auto" } else { "none" },
            json(overrides),
            json(&in_force)
        );
        Ok(in_force)
    }

    /// The checkpoint's recommendations, by OpenAI field name.
    pub fn from_recommended(r: &RecommendedSampling) -> Self {
        Self {
            temperature: r.temperature,
            top_p: r.top_p,
            top_k: r.top_k,
            min_p: r.min_p,
            repetition_penalty: r.repetition_penalty,
            max_tokens: r.max_tokens,
            ..Self::default()
        }
    }

    /// `self`, with every field `overrides` sets taken from it.
    pub fn overridden_by(self, overrides: &Self) -> Self {
        Self {
            temperature: overrides.temperature.or(self.temperature),
            top_p: overrides.top_p.or(self.top_p),
            top_k: overrides.top_k.or(self.top_k),
            min_p: overrides.min_p.or(self.min_p),
            seed: overrides.seed.or(self.seed),
            max_tokens: overrides.max_tokens.or(self.max_tokens),
            repetition_penalty: overrides.repetition_penalty.or(self.repetition_penalty),
            presence_penalty: overrides.presence_penalty.or(self.presence_penalty),
            frequency_penalty: overrides.frequency_penalty.or(self.frequency_penalty),
        }
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
