use candle_core::quantized::gguf_file;

use crate::error::{ModelError, Result};

/// Transformer families this runner executes; they differ only in tensor names and small
/// details (QKV bias, RoPE pairing), so one forward serves both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    Llama,
    Qwen2,
    /// Qwen3 layout: no QKV bias, RMSNorm on each query/key head before RoPE (Hugging Face
    /// checkpoints only; WeDLM-8B is one).
    Qwen3,
}

impl Architecture {
    fn from_name(name: &str) -> Result<Self> {
        match name {
            "llama" => Ok(Self::Llama),
            "qwen2" => Ok(Self::Qwen2),
            other => Err(ModelError::Unsupported(format!("architecture `{other}` (supported: llama, qwen2)"))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
        }
    }
}

#[derive(Clone, Debug)]
pub struct ModelConfig {
    pub architecture: Architecture,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub max_position_embeddings: usize,
    pub rope_theta: f32,
    /// GGUF llama weights are permuted for interleaved (2i, 2i+1) pairs; qwen2 uses
    /// NEOX pairs (i, i + d/2). Same mapping as llama.cpp's `llama_model_rope_type`.
    pub rope_interleaved: bool,
    pub rms_norm_eps: f32,
    pub qkv_bias: bool,
    /// Per-head RMSNorm of Q and K before RoPE (Qwen3's QK-norm).
    pub qk_norm: bool,
    /// The `[MASK]` id WeDLM checkpoints predict through; `None` for ordinary models.
    pub mask_token_id: Option<u32>,
}

impl ModelConfig {
    pub fn from_gguf(content: &gguf_file::Content) -> Result<Self> {
        let arch_name = metadata_string(content, "general.architecture")?;
        let architecture = Architecture::from_name(&arch_name)?;
        let key = |k: &str| format!("{arch_name}.{k}");
        let num_heads = metadata_u32(content, &key("attention.head_count"))? as usize;
        let hidden_size = metadata_u32(content, &key("embedding_length"))? as usize;
        if num_heads == 0 || !hidden_size.is_multiple_of(num_heads) {
            return Err(ModelError::Unsupported(format!(
                "embedding_length {hidden_size} not divisible by head_count {num_heads}"
            )));
        }
        let num_kv_heads =
            metadata_u32(content, &key("attention.head_count_kv")).map(|v| v as usize).unwrap_or(num_heads);
        if num_kv_heads == 0 || !num_heads.is_multiple_of(num_kv_heads) {
            return Err(ModelError::Unsupported(format!(
                "head_count {num_heads} not a multiple of head_count_kv {num_kv_heads}"
            )));
        }
        let head_dim = hidden_size / num_heads;
        let vocab_size = content
            .tensor_infos
            .get("token_embd.weight")
            .map(|t| t.shape.dims()[0])
            .ok_or_else(|| ModelError::MissingMetadata("tensor token_embd.weight".into()))?;
        Ok(Self {
            architecture,
            hidden_size,
            intermediate_size: metadata_u32(content, &key("feed_forward_length"))? as usize,
            num_layers: metadata_u32(content, &key("block_count"))? as usize,
            num_heads,
            num_kv_heads,
            head_dim,
            vocab_size,
            max_position_embeddings: metadata_u32(content, &key("context_length")).map(|v| v as usize).unwrap_or(4096),
            rope_theta: metadata_f32(content, &key("rope.freq_base")).unwrap_or(10_000.0),
            rope_interleaved: architecture == Architecture::Llama,
            rms_norm_eps: metadata_f32(content, &key("attention.layer_norm_rms_epsilon"))?,
            qkv_bias: architecture == Architecture::Qwen2,
            qk_norm: false,
            mask_token_id: None,
        })
    }

    /// Bytes of K plus V for one token across all layers, in f32.
    pub fn kv_bytes_per_token(&self) -> usize {
        2 * self.num_layers * self.num_kv_heads * self.head_dim * std::mem::size_of::<f32>()
    }
}

fn metadata<'a>(content: &'a gguf_file::Content, key: &str) -> Result<&'a gguf_file::Value> {
    content.metadata.get(key).ok_or_else(|| ModelError::MissingMetadata(key.to_string()))
}

fn metadata_u32(content: &gguf_file::Content, key: &str) -> Result<u32> {
    let value = metadata(content, key)?;
    value
        .to_u32()
        .or_else(|_| value.to_u64().map(|v| v as u32))
        .or_else(|_| value.to_i32().map(|v| v as u32))
        .map_err(|_| ModelError::MissingMetadata(format!("{key} (expected an integer)")))
}

fn metadata_f32(content: &gguf_file::Content, key: &str) -> Result<f32> {
    let value = metadata(content, key)?;
    value
        .to_f32()
        .or_else(|_| value.to_f64().map(|v| v as f32))
        .map_err(|_| ModelError::MissingMetadata(format!("{key} (expected a float)")))
}

fn metadata_string(content: &gguf_file::Content, key: &str) -> Result<String> {
    metadata(content, key)?
        .to_string()
        .cloned()
        .map_err(|_| ModelError::MissingMetadata(format!("{key} (expected a string)")))
}
