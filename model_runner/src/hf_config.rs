//! `config.json` of a Hugging Face checkpoint directory -> [`ModelConfig`].
//!
//! Read as loose JSON rather than a typed struct: the fields that matter are few, several
//! come as an int or a list (`eos_token_id`), and WeDLM adds its own (`mask_token_id`,
//! `qk_norm`) to otherwise plain Qwen2 / Qwen3 / llama configs.

use serde_json::Value;

use crate::config::{Activation, Architecture, ModelConfig, RopeConfig};
use crate::error::{ModelError, Result};

/// WeDLM's fallback `[MASK]` id when a WeDLM `config.json` names none: the first id after
/// Qwen2.5's 22 special tokens (the reference engine and its trainer hard-code it). Only for
/// WeDLM checkpoints: in a stock Qwen2.5 / Qwen3 vocabulary 151665 is an ordinary token
/// (`<tool_response>` in Qwen3's), and a model never trained on masks decodes garbage from it.
pub const DEFAULT_MASK_TOKEN_ID: u32 = 151_665;

/// What the loader needs from `config.json` beyond the [`ModelConfig`].
#[derive(Clone, Debug)]
pub struct HfConfig {
    pub model: ModelConfig,
    /// `lm_head` shares the embedding matrix (its tensor is then absent).
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
}

impl HfConfig {
    pub fn parse(text: &str) -> Result<Self> {
        let json: Value = serde_json::from_str(text)
            .map_err(|e| ModelError::Unsupported(format!("config.json is not valid JSON: {e}")))?;
        let cfg = Fields(&json);
        let architecture = architecture(&cfg)?;
        // Defaults only: the weight loader goes by which bias / norm tensors the checkpoint has.
        let qkv_bias = cfg.bool("attention_bias").unwrap_or(architecture == Architecture::Qwen2);
        let qk_norm = architecture == Architecture::Qwen3;
        if cfg.get("rope_scaling").is_some_and(|v| !rope_scaling_is_default(v)) {
            return Err(ModelError::Unsupported(format!(
                "rope_scaling {} (only unscaled RoPE is implemented)",
                cfg.get("rope_scaling").map(Value::to_string).unwrap_or_default()
            )));
        }
        let hidden_size = cfg.usize("hidden_size")?;
        let num_heads = cfg.usize("num_attention_heads")?;
        let num_kv_heads = cfg.opt_usize("num_key_value_heads")?.unwrap_or(num_heads);
        if num_heads == 0 || num_kv_heads == 0 || num_heads % num_kv_heads != 0 {
            return Err(ModelError::Unsupported(format!(
                "num_attention_heads {num_heads} is not a positive multiple of num_key_value_heads {num_kv_heads}"
            )));
        }
        let head_dim = match cfg.opt_usize("head_dim")? {
            Some(d) => d,
            None if hidden_size % num_heads == 0 => hidden_size / num_heads,
            None => {
                return Err(ModelError::Unsupported(format!(
                    "hidden_size {hidden_size} not divisible by num_attention_heads {num_heads}"
                )))
            }
        };
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(ModelError::Unsupported(format!("head_dim {head_dim} must be even and positive")));
        }
        let vocab_size = cfg.usize("vocab_size")?;
        let mask_token_id = match cfg.opt_usize("mask_token_id")? {
            Some(id) if id < vocab_size => Some(id as u32),
            Some(id) => {
                return Err(ModelError::Unsupported(format!(
                    "mask_token_id {id} is outside the vocabulary of {vocab_size}"
                )))
            }
            None if is_wedlm(&cfg) => ((DEFAULT_MASK_TOKEN_ID as usize) < vocab_size).then_some(DEFAULT_MASK_TOKEN_ID),
            None => None,
        };
        let model = ModelConfig {
            architecture,
            hidden_size,
            intermediate_size: cfg.usize("intermediate_size")?,
            num_layers: cfg.usize("num_hidden_layers")?,
            num_heads,
            num_kv_heads,
            head_dim,
            vocab_size,
            max_position_embeddings: cfg.opt_usize("max_position_embeddings")?.unwrap_or(4096),
            // Hugging Face q/k weights are laid out for rotate_half (NEOX pairs) in every family;
            // only llama.cpp's GGUF conversion permutes llama to interleaved pairs.
            rope: RopeConfig::plain(cfg.f32("rope_theta").unwrap_or(10_000.0), head_dim, false),
            long_context_rope: None,
            rms_norm_eps: cfg.f32("rms_norm_eps").unwrap_or(1e-6),
            qkv_bias,
            qk_norm,
            sandwich_norms: false,
            activation: Activation::Silu,
            embedding_scale: None,
            attention_scale: ModelConfig::default_attention_scale(head_dim),
            final_logit_softcap: None,
            sliding_window: None,
            mask_token_id,
        };
        Ok(Self {
            model,
            tie_word_embeddings: cfg.bool("tie_word_embeddings").unwrap_or(false),
            bos_token_id: cfg.ids("bos_token_id").first().copied(),
            eos_token_ids: cfg.ids("eos_token_id"),
        })
    }
}

fn architecture(cfg: &Fields<'_>) -> Result<Architecture> {
    let by_type = match cfg.str("model_type") {
        Some("llama") => Some(Architecture::Llama),
        Some("qwen2") => Some(Architecture::Qwen2),
        Some("qwen3") => Some(Architecture::Qwen3),
        // WeDLM-7B is a Qwen2.5 (bias, no QK-norm), WeDLM-8B a Qwen3 (QK-norm, no bias).
        Some("wedlm") => Some(match (cfg.bool("qk_norm"), cfg.bool("attention_bias")) {
            (Some(true), _) | (None, Some(false)) => Architecture::Qwen3,
            _ => Architecture::Qwen2,
        }),
        _ => None,
    };
    if let Some(a) = by_type {
        return Ok(a);
    }
    let class = cfg.get("architectures").and_then(|a| a.get(0)).and_then(Value::as_str).unwrap_or("");
    match class {
        "LlamaForCausalLM" => Ok(Architecture::Llama),
        "Qwen2ForCausalLM" => Ok(Architecture::Qwen2),
        "Qwen3ForCausalLM" => Ok(Architecture::Qwen3),
        _ => Err(ModelError::Unsupported(format!(
            "model_type {:?} / architectures {:?} (supported: llama, qwen2, qwen3, wedlm)",
            cfg.str("model_type").unwrap_or(""),
            class
        ))),
    }
}

/// A WeDLM checkpoint says so in `model_type` or in its model class; a stock Qwen / llama
/// config carries neither.
fn is_wedlm(cfg: &Fields<'_>) -> bool {
    let class = cfg.get("architectures").and_then(|a| a.get(0)).and_then(Value::as_str);
    cfg.str("model_type") == Some("wedlm") || class == Some("WeDLMForCausalLM")
}

fn rope_scaling_is_default(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => {
            let kind = m.get("rope_type").or_else(|| m.get("type")).and_then(Value::as_str);
            kind == Some("default")
        }
        _ => false,
    }
}

/// Typed reads of config fields; `null` counts as absent.
struct Fields<'a>(&'a Value);

impl Fields<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    fn str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    fn bool(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(Value::as_bool)
    }

    fn f32(&self, key: &str) -> Option<f32> {
        self.get(key).and_then(Value::as_f64).map(|v| v as f32)
    }

    fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(|n| Some(n as usize)).ok_or_else(|| {
                ModelError::Unsupported(format!("config.json `{key}` must be a non-negative integer, got {v}"))
            }),
        }
    }

    fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?.ok_or_else(|| ModelError::Unsupported(format!("config.json lacks `{key}`")))
    }

    /// An id field that may be one integer or a list of them.
    fn ids(&self, key: &str) -> Vec<u32> {
        match self.get(key) {
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_u64).map(|i| i as u32).collect(),
            Some(v) => v.as_u64().map(|i| vec![i as u32]).unwrap_or_default(),
            None => Vec::new(),
        }
    }
}
