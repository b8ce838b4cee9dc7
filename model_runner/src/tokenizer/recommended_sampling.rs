//! The sampling values a checkpoint's authors recommend: a GGUF's `general.sampling.*` keys
//! (llama.cpp's converter copies them from the model's `generation_config.json`), or a
//! Hugging Face directory's `generation_config.json` itself. A server may use them as the
//! defaults for fields a request leaves out (vLLM's `--generation-config auto`); nothing
//! here decides that.

use std::path::Path;

use candle_core::quantized::gguf_file::{self, Value};

use crate::error::{ModelError, Result};

/// What the checkpoint declares; `None` where it says nothing. A declared zero (`min_p: 0`)
/// is a real choice and stays `Some(0.0)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecommendedSampling {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    /// `max_new_tokens` of `generation_config.json`; GGUF files have no such key.
    pub max_tokens: Option<i64>,
}

#[derive(Clone, Copy)]
enum Field {
    Temperature,
    TopP,
    TopK,
    MinP,
    RepetitionPenalty,
    MaxTokens,
}

/// llama.cpp's keys (gguf-py `Keys.General.SAMPLING_*`) that have an OpenAI/vLLM field. The
/// others (`penalty_last_n`, `xtc_*`, `mirostat*`, `sequence`) have no counterpart here.
const GGUF_KEYS: [(&str, Field); 5] = [
    ("general.sampling.temp", Field::Temperature),
    ("general.sampling.top_p", Field::TopP),
    ("general.sampling.top_k", Field::TopK),
    ("general.sampling.min_p", Field::MinP),
    ("general.sampling.penalty_repeat", Field::RepetitionPenalty),
];

/// The `generation_config.json` keys vLLM takes defaults from (`get_diff_sampling_param`).
const HF_KEYS: [(&str, Field); 6] = [
    ("temperature", Field::Temperature),
    ("top_p", Field::TopP),
    ("top_k", Field::TopK),
    ("min_p", Field::MinP),
    ("repetition_penalty", Field::RepetitionPenalty),
    ("max_new_tokens", Field::MaxTokens),
];

impl RecommendedSampling {
    /// Reads a GGUF file's metadata, or a checkpoint directory's `generation_config.json`
    /// (none there: nothing recommended). A value that is not a number, or not a whole number
    /// where one is needed, is an error naming the key.
    pub fn read(path: &Path) -> Result<Self> {
        if path.is_dir() {
            Self::from_generation_config(&path.join("generation_config.json"))
        } else {
            Self::from_gguf(path)
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    fn from_gguf(path: &Path) -> Result<Self> {
        let mut reader = std::io::BufReader::new(std::fs::File::open(path)?);
        let content = gguf_file::Content::read(&mut reader).map_err(|e| load_error(path, e.to_string()))?;
        let mut out = Self::default();
        for (key, field) in GGUF_KEYS {
            if let Some(value) = content.metadata.get(key) {
                let number = gguf_number(value).ok_or_else(|| load_error(path, format!("`{key}` is not a number")))?;
                out.set(field, number).map_err(|m| load_error(path, format!("`{key}` {m}")))?;
            }
        }
        Ok(out)
    }

    fn from_generation_config(path: &Path) -> Result<Self> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(e.into()),
        };
        let config: serde_json::Value = serde_json::from_str(&text).map_err(|e| load_error(path, e.to_string()))?;
        let mut out = Self::default();
        for (key, field) in HF_KEYS {
            match config.get(key) {
                None | Some(serde_json::Value::Null) => {}
                Some(value) => {
                    let number = value.as_f64().ok_or_else(|| load_error(path, format!("`{key}` is not a number")))?;
                    out.set(field, number).map_err(|m| load_error(path, format!("`{key}` {m}")))?;
                }
            }
        }
        Ok(out)
    }

    fn set(&mut self, field: Field, value: f64) -> std::result::Result<(), &'static str> {
        let whole = || {
            // Counts arrive as floats from some writers (`20.0`); a fraction is a broken file.
            if value.fract() == 0.0 && value.abs() < 1e15 {
                Ok(value as i64)
            } else {
                Err("must be a whole number")
            }
        };
        match field {
            Field::Temperature => self.temperature = Some(value as f32),
            Field::TopP => self.top_p = Some(value as f32),
            Field::MinP => self.min_p = Some(value as f32),
            Field::RepetitionPenalty => self.repetition_penalty = Some(value as f32),
            Field::TopK => self.top_k = Some(whole()?),
            Field::MaxTokens => self.max_tokens = Some(whole()?),
        }
        Ok(())
    }
}

fn gguf_number(value: &Value) -> Option<f64> {
    Some(match *value {
        Value::U8(x) => x.into(),
        Value::I8(x) => x.into(),
        Value::U16(x) => x.into(),
        Value::I16(x) => x.into(),
        Value::U32(x) => x.into(),
        Value::I32(x) => x.into(),
        Value::U64(x) => x as f64,
        Value::I64(x) => x as f64,
        Value::F32(x) => x.into(),
        Value::F64(x) => x,
        Value::Bool(_) | Value::String(_) | Value::Array(_) => return None,
    })
}

fn load_error(path: &Path, message: String) -> ModelError {
    ModelError::Load { path: path.display().to_string(), message }
}
