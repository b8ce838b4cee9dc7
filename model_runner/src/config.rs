//! What the shared forward needs to know about a model: its shapes and the few choices that
//! tell one family from another (norms, activation, RoPE, which layers attend in a window).
//! A family is a description here, read from GGUF metadata in `gguf_config.rs` or from a
//! checkpoint's `config.json` in `hf_config.rs`, never a forward of its own.

/// Transformer families this runner executes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    Llama,
    Qwen2,
    /// No QKV bias, RMSNorm on each query/key head before RoPE.
    Qwen3,
    /// Q/K norms, a second norm after attention and after the MLP, GELU, embeddings scaled by
    /// sqrt(hidden), and 5 of every 6 layers attending in a sliding window with their own RoPE base.
    Gemma3,
    /// Fused QKV and gate/up projections; RoPE frequency factors for its long-context variants.
    Phi3,
}

impl Architecture {
    pub fn name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Gemma3 => "gemma3",
            Self::Phi3 => "phi3",
        }
    }
}

/// The MLP's gate activation: `act(gate) * up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Silu,
    /// GELU with the tanh approximation (`gelu_pytorch_tanh`, ggml's `gelu`).
    GeluTanh,
}

/// How positions rotate queries and keys (ggml's `rope_ext` parameters).
#[derive(Clone, Debug, PartialEq)]
pub struct RopeConfig {
    pub theta: f32,
    /// Leading dimensions of each head that rotate (`rope.dimension_count`); the rest pass through.
    pub rotary_dim: usize,
    /// GGUF llama weights are permuted for interleaved (2i, 2i+1) pairs; the other families
    /// use NEOX pairs (i, i + d/2). Same mapping as llama.cpp's `llama_model_rope_type`.
    pub interleaved: bool,
    /// Linear position scaling (`1 / rope.scaling.factor`).
    pub freq_scale: f32,
    /// Multiplies cos and sin (`rope.scaling.attn_factor`).
    pub attn_factor: f32,
    /// Per-frequency divisors (`rope_freqs.weight` for Llama 3.x; for Phi-3 long-context files
    /// whichever of [`LongContextRope`]'s two sets the served context selects), `rotary_dim / 2`
    /// of them.
    pub freq_factors: Option<Vec<f32>>,
}

/// Phi-3's LongRoPE (`rope_factors_short.weight`, `rope_factors_long.weight`): the long factors
/// rotate every position once the context served exceeds the one the model was first trained
/// on, the short ones otherwise. The choice is made once for the context served, as llama.cpp
/// makes it from `n_ctx`, so cached keys never mix the two rotations.
#[derive(Clone, Debug, PartialEq)]
pub struct LongContextRope {
    /// `rope.scaling.original_context_length`.
    pub original_context: usize,
    pub short_factors: Option<Vec<f32>>,
    pub long_factors: Vec<f32>,
}

impl LongContextRope {
    /// The factors that rotate a context of `max_positions`.
    pub fn factors_for(&self, max_positions: usize) -> Option<&[f32]> {
        if max_positions > self.original_context {
            Some(&self.long_factors)
        } else {
            self.short_factors.as_deref()
        }
    }
}

impl RopeConfig {
    /// Plain RoPE over the whole head.
    pub fn plain(theta: f32, head_dim: usize, interleaved: bool) -> Self {
        Self { theta, rotary_dim: head_dim, interleaved, freq_scale: 1.0, attn_factor: 1.0, freq_factors: None }
    }
}

/// Layers that attend only to the last `size` keys (their own included).
#[derive(Clone, Debug, PartialEq)]
pub struct SlidingWindow {
    pub size: usize,
    /// `windowed[l]`: layer `l` attends in the window; the others attend to everything.
    pub windowed: Vec<bool>,
    /// RoPE of the windowed layers (their own base, no position scaling).
    pub rope: RopeConfig,
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
    /// RoPE of every layer that is not windowed.
    pub rope: RopeConfig,
    /// Two sets of frequency factors to choose `rope.freq_factors` from by the context served.
    pub long_context_rope: Option<LongContextRope>,
    pub rms_norm_eps: f32,
    pub qkv_bias: bool,
    /// Per-head RMSNorm of Q and K before RoPE.
    pub qk_norm: bool,
    /// RMSNorm of the attention output and of the MLP output before each joins the residual.
    pub sandwich_norms: bool,
    pub activation: Activation,
    /// Token embeddings are multiplied by this before the first layer.
    pub embedding_scale: Option<f32>,
    /// Multiplies `q . k` before the softmax.
    pub attention_scale: f32,
    /// Final logits become `cap * tanh(logits / cap)`.
    pub final_logit_softcap: Option<f32>,
    pub sliding_window: Option<SlidingWindow>,
    /// The `[MASK]` id WeDLM checkpoints predict through; `None` for ordinary models.
    pub mask_token_id: Option<u32>,
}

impl ModelConfig {
    /// The window layer `l` attends in, if any.
    pub fn layer_window(&self, l: usize) -> Option<usize> {
        self.sliding_window.as_ref().filter(|w| w.windowed.get(l).copied().unwrap_or(false)).map(|w| w.size)
    }

    /// The RoPE layer `l` rotates with.
    pub fn layer_rope(&self, l: usize) -> &RopeConfig {
        match &self.sliding_window {
            Some(w) if w.windowed.get(l).copied().unwrap_or(false) => &w.rope,
            _ => &self.rope,
        }
    }

    /// The default `1 / sqrt(head_dim)` attention scale.
    pub fn default_attention_scale(head_dim: usize) -> f32 {
        1.0 / (head_dim as f32).sqrt()
    }
}
