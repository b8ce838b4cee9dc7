//! [`ModelConfig`] from the metadata llama.cpp writes into a GGUF file, family by family.
//! Every key is read the way llama.cpp reads it (`llama-model.cpp`, `models/<arch>.cpp`), and
//! any combination this runner would not execute the way llama.cpp does is refused by name.

use candle_core::quantized::gguf_file;

use crate::config::{Activation, Architecture, ModelConfig, RopeConfig, SlidingWindow};
use crate::error::{ModelError, Result};

/// Gemma 3's default: every sixth layer attends globally, the others in the window.
const GEMMA3_WINDOW_PATTERN: usize = 6;
/// llama.cpp's default RoPE base of windowed layers (`rope_freq_base_train_swa`).
const DEFAULT_WINDOW_ROPE_BASE: f32 = 10_000.0;
const SUPPORTED: &str = "llama, qwen2, qwen3, gemma3, phi3";

fn architecture(name: &str) -> Result<Architecture> {
    Ok(match name {
        "llama" => Architecture::Llama,
        "qwen2" => Architecture::Qwen2,
        "qwen3" => Architecture::Qwen3,
        "gemma3" => Architecture::Gemma3,
        "phi3" => Architecture::Phi3,
        other => return Err(ModelError::Unsupported(format!("architecture `{other}` (supported: {SUPPORTED})"))),
    })
}

fn unsupported(arch: Architecture, what: String) -> ModelError {
    ModelError::Unsupported(format!("{} file with {what}", arch.name()))
}

impl ModelConfig {
    /// Shapes and family choices from the metadata. RoPE frequency factors are tensors, so
    /// the weight loader fills `rope.freq_factors` (see [`ModelConfig::rope_factors_tensor`]).
    pub fn from_gguf(content: &gguf_file::Content) -> Result<Self> {
        let md = Metadata(content);
        let arch_name = md.string("general.architecture")?;
        let arch = architecture(&arch_name)?;
        let key = |k: &str| format!("{arch_name}.{k}");
        let num_heads = md.u32(&key("attention.head_count"))? as usize;
        let hidden_size = md.u32(&key("embedding_length"))? as usize;
        if num_heads == 0 {
            return Err(unsupported(arch, "attention.head_count 0".into()));
        }
        let num_kv_heads = md.opt_u32(&key("attention.head_count_kv"))?.map_or(num_heads, |v| v as usize);
        if num_kv_heads == 0 || !num_heads.is_multiple_of(num_kv_heads) {
            return Err(unsupported(
                arch,
                format!("head_count {num_heads} not a multiple of head_count_kv {num_kv_heads}"),
            ));
        }
        let head_dim = match md.opt_u32(&key("attention.key_length"))? {
            Some(d) => d as usize,
            None if hidden_size.is_multiple_of(num_heads) => hidden_size / num_heads,
            None => {
                return Err(unsupported(
                    arch,
                    format!("embedding_length {hidden_size} not divisible by {num_heads} heads"),
                ))
            }
        };
        let value_dim = md.opt_u32(&key("attention.value_length"))?.map_or(head_dim, |v| v as usize);
        if value_dim != head_dim || head_dim == 0 || head_dim % 2 != 0 {
            return Err(unsupported(arch, format!("key length {head_dim} and value length {value_dim}")));
        }
        if md.opt_u32(&key("expert_count"))?.is_some_and(|n| n > 0) {
            return Err(unsupported(arch, "mixture-of-experts layers (expert_count)".into()));
        }
        let num_layers = md.u32(&key("block_count"))? as usize;
        let context_length = md.opt_u32(&key("context_length"))?.map_or(4096, |v| v as usize);
        let rope = rope_config(&md, arch, &key, head_dim)?;
        let sliding_window = match arch {
            Architecture::Gemma3 => gemma3_window(&md, &key, num_layers, &rope)?,
            // llama.cpp runs Phi-3 without its window (models/phi3.cpp); so does this runner,
            // so that the two agree.
            _ => None,
        };
        let vocab_size = content
            .tensor_infos
            .get("token_embd.weight")
            .map(|t| t.shape.dims()[0])
            .ok_or_else(|| ModelError::MissingMetadata("tensor token_embd.weight".into()))?;
        let has_tensor = |name: &str| content.tensor_infos.contains_key(name);
        let gemma = arch == Architecture::Gemma3;
        // llama.cpp's Gemma 3 scale: 1/sqrt(hidden / heads) for the 27B model (62 layers),
        // 1/sqrt(head_dim) for the others.
        let attention_scale = if gemma && num_layers == 62 {
            ModelConfig::default_attention_scale(hidden_size / num_heads)
        } else {
            ModelConfig::default_attention_scale(head_dim)
        };
        let final_logit_softcap = match md.opt_f32(&key("final_logit_softcapping"))? {
            Some(cap) if cap > 0.0 => Some(cap),
            _ => None,
        };
        if md.opt_f32(&key("attn_logit_softcapping"))?.is_some_and(|c| c > 0.0) {
            return Err(unsupported(arch, "attention logit soft-capping".into()));
        }
        Ok(Self {
            architecture: arch,
            hidden_size,
            intermediate_size: md.u32(&key("feed_forward_length"))? as usize,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            vocab_size,
            max_position_embeddings: context_length,
            rope,
            long_context_rope: None,
            rms_norm_eps: md.f32(&key("attention.layer_norm_rms_epsilon"))?,
            qkv_bias: has_tensor("blk.0.attn_q.bias") || has_tensor("blk.0.attn_qkv.bias"),
            qk_norm: matches!(arch, Architecture::Qwen3 | Architecture::Gemma3),
            sandwich_norms: gemma,
            activation: if gemma { Activation::GeluTanh } else { Activation::Silu },
            embedding_scale: gemma.then(|| (hidden_size as f32).sqrt()),
            attention_scale,
            final_logit_softcap,
            sliding_window,
            mask_token_id: None,
        })
    }

    /// The tensor holding RoPE frequency factors for every context, if this file has one
    /// (Llama 3.x's `rope_freqs.weight`; llama.cpp prefers it to Phi-3's pair as well).
    pub const ROPE_FACTORS: &'static str = "rope_freqs.weight";
    /// Phi-3's long-context pair, chosen between by the context served ([`LongContextRope`]).
    pub const ROPE_FACTORS_SHORT: &'static str = "rope_factors_short.weight";
    pub const ROPE_FACTORS_LONG: &'static str = "rope_factors_long.weight";

    /// The context Phi-3's short factors were trained for: `rope.scaling.original_context_length`,
    /// or the whole context where the file does not say (llama.cpp's `n_ctx_orig_yarn`).
    pub fn original_context_length(content: &gguf_file::Content) -> Result<usize> {
        let md = Metadata(content);
        let arch_name = md.string("general.architecture")?;
        let key = |k: &str| format!("{arch_name}.{k}");
        match md.opt_u32(&key("rope.scaling.original_context_length"))? {
            Some(n) if n > 0 => Ok(n as usize),
            _ => Ok(md.opt_u32(&key("context_length"))?.map_or(4096, |v| v as usize)),
        }
    }
}

/// The RoPE of the global layers (frequency factors are tensors: the weight loader adds them).
fn rope_config(md: &Metadata, arch: Architecture, key: &dyn Fn(&str) -> String, head_dim: usize) -> Result<RopeConfig> {
    let rotary_dim = md.opt_u32(&key("rope.dimension_count"))?.map_or(head_dim, |v| v as usize);
    if rotary_dim == 0 || rotary_dim % 2 != 0 || rotary_dim > head_dim {
        return Err(unsupported(arch, format!("rope.dimension_count {rotary_dim} for heads of {head_dim}")));
    }
    match md.opt_string(&key("rope.scaling.type"))?.as_deref() {
        None | Some("none") | Some("linear") => {}
        Some(other) => return Err(unsupported(arch, format!("rope.scaling.type `{other}` (supported: none, linear)"))),
    }
    let factor = match md.opt_f32(&key("rope.scaling.factor"))? {
        Some(f) => Some(f),
        None => md.opt_f32(&key("rope.scale_linear"))?,
    };
    let freq_scale = match factor {
        None => 1.0,
        Some(0.0) => 1.0,
        Some(f) if f > 0.0 && f.is_finite() => 1.0 / f,
        Some(f) => return Err(unsupported(arch, format!("rope.scaling.factor {f}"))),
    };
    let rope = RopeConfig {
        theta: md.opt_f32(&key("rope.freq_base"))?.unwrap_or(10_000.0),
        rotary_dim,
        interleaved: arch == Architecture::Llama,
        freq_scale,
        attn_factor: md.opt_f32(&key("rope.scaling.attn_factor"))?.unwrap_or(1.0),
        freq_factors: None,
    };
    Ok(rope)
}

fn gemma3_window(
    md: &Metadata,
    key: &dyn Fn(&str) -> String,
    num_layers: usize,
    global_rope: &RopeConfig,
) -> Result<Option<SlidingWindow>> {
    let size = match md.opt_u32(&key("attention.sliding_window"))? {
        Some(n) if n > 0 => n as usize,
        _ => return Ok(None),
    };
    let pattern_key = key("attention.sliding_window_pattern");
    let windowed = match md.0.metadata.get(&pattern_key) {
        Some(gguf_file::Value::Array(flags)) => {
            let flags: Option<Vec<bool>> = flags.iter().map(|v| v.to_bool().ok()).collect();
            match flags {
                Some(f) if f.len() == num_layers => f,
                _ => return Err(unsupported(Architecture::Gemma3, format!("malformed {pattern_key}"))),
            }
        }
        _ => {
            let n = md.opt_u32(&pattern_key)?.map_or(GEMMA3_WINDOW_PATTERN, |v| v as usize);
            // As llama.cpp's `set_swa_pattern`: the last layer of every `n` is global.
            (0..num_layers).map(|l| n == 0 || l % n < n - 1).collect()
        }
    };
    let rope = RopeConfig {
        theta: md.opt_f32(&key("rope.freq_base_swa"))?.unwrap_or(DEFAULT_WINDOW_ROPE_BASE),
        freq_scale: 1.0,
        ..global_rope.clone()
    };
    Ok(Some(SlidingWindow { size, windowed, rope }))
}

/// Typed reads of GGUF metadata, accepting the integer and float widths converters write.
struct Metadata<'a>(&'a gguf_file::Content);

impl Metadata<'_> {
    fn get(&self, key: &str) -> Option<&gguf_file::Value> {
        self.0.metadata.get(key)
    }

    fn opt_u32(&self, key: &str) -> Result<Option<u32>> {
        let Some(value) = self.get(key) else { return Ok(None) };
        value
            .to_u32()
            .or_else(|_| value.to_u64().map(|v| v as u32))
            .or_else(|_| value.to_i32().map(|v| v as u32))
            .map(Some)
            .map_err(|_| ModelError::MissingMetadata(format!("{key} (expected an integer)")))
    }

    fn u32(&self, key: &str) -> Result<u32> {
        self.opt_u32(key)?.ok_or_else(|| ModelError::MissingMetadata(key.to_string()))
    }

    fn opt_f32(&self, key: &str) -> Result<Option<f32>> {
        let Some(value) = self.get(key) else { return Ok(None) };
        value
            .to_f32()
            .or_else(|_| value.to_f64().map(|v| v as f32))
            .map(Some)
            .map_err(|_| ModelError::MissingMetadata(format!("{key} (expected a float)")))
    }

    fn f32(&self, key: &str) -> Result<f32> {
        self.opt_f32(key)?.ok_or_else(|| ModelError::MissingMetadata(key.to_string()))
    }

    fn opt_string(&self, key: &str) -> Result<Option<String>> {
        let Some(value) = self.get(key) else { return Ok(None) };
        value
            .to_string()
            .cloned()
            .map(Some)
            .map_err(|_| ModelError::MissingMetadata(format!("{key} (expected a string)")))
    }

    fn string(&self, key: &str) -> Result<String> {
        self.opt_string(key)?.ok_or_else(|| ModelError::MissingMetadata(key.to_string()))
    }
}
