use std::sync::Arc;

use crate::attention::{paged_attention, AttentionShape};
use crate::attention_exact::exact_attention;
use crate::batch::ForwardBatch;
use crate::config::Activation;
use crate::config::ModelConfig;
use crate::embedding::Embedding;
use crate::error::{ModelError, Result};
use crate::footprint::WeightFootprint;
use crate::kv_cache::KvCache;
use crate::linear::{AttentionKernel, Linear};
use crate::metrics::AttnMetrics;
use crate::ops;
use crate::rope::Rope;

// Loading builds `Model`/`Layer` directly, so each format's loader is a child module.
mod gguf_weights;
mod hf_weights;

struct Layer {
    attn_norm: Vec<f32>,
    wq: Linear,
    wk: Linear,
    wv: Linear,
    wo: Linear,
    /// QK-norm weights (`[head_dim]`), applied to every head before RoPE.
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    /// Sandwich norms: the attention and MLP outputs are normalized before the residual add.
    post_attn_norm: Option<Vec<f32>>,
    ffn_norm: Vec<f32>,
    w_gate: Linear,
    w_up: Linear,
    w_down: Linear,
    post_ffn_norm: Option<Vec<f32>>,
    /// Keys this layer attends to, counted back from the query's own; `None`: all of them.
    window: Option<usize>,
    /// Index into `Model::ropes`.
    rope: usize,
}

/// A decoder-only transformer (every family `ModelConfig` describes) whose forward takes a packed varlen batch
/// with per-row positions and slot mapping, instead of candle-transformers' one-sequence,
/// one-position `forward(x, index_pos)` with its cache inside the model.
pub struct Model {
    config: ModelConfig,
    /// `[vocab, hidden]`, kept in its GGUF blocks where it can be (see `embedding.rs`).
    embedding: Embedding,
    layers: Vec<Layer>,
    final_norm: Vec<f32>,
    lm_head: Linear,
    /// The distinct RoPE tables the layers use (one, or a global and a windowed one).
    ropes: Vec<Rope>,
    /// Mirror candle-transformers' attention ops (see `attention_exact`) instead of the fused kernel.
    exact_attention: bool,
}

/// Logits of the requested rows plus attention metrics for the spans that asked.
pub struct ForwardOutput {
    /// `[logits_rows.len(), vocab]`, row-major.
    pub logits: Vec<f32>,
    pub vocab_size: usize,
    pub attn_metrics: Vec<Option<AttnMetrics>>,
}

impl ForwardOutput {
    pub fn row(&self, i: usize) -> &[f32] {
        &self.logits[i * self.vocab_size..(i + 1) * self.vocab_size]
    }
}

impl Model {
    /// The RoPE tables of `config`'s layers for positions `0..max_positions`: the global
    /// one, then the windowed one if any layer has a window.
    fn ropes_for(config: &ModelConfig, max_positions: usize) -> Vec<Rope> {
        let mut ropes = vec![Rope::new(&config.rope, config.head_dim, max_positions)];
        if let Some(window) = &config.sliding_window {
            ropes.push(Rope::new(&window.rope, config.head_dim, max_positions));
        }
        ropes
    }

    /// Declares the longest sequence the model will serve. Only a model with Phi-3's two RoPE
    /// factor sets depends on it: beyond the original context it rotates every position by
    /// the long-context factors, as llama.cpp does for its `n_ctx`. The tables keep every
    /// trained position, so rows past a sequence's end (MTI, WeDLM) still rotate.
    pub fn set_served_context(&mut self, max_model_len: usize) {
        let Some(long) = &self.config.long_context_rope else { return };
        let factors = long.factors_for(max_model_len).map(<[f32]>::to_vec);
        if max_model_len > long.original_context {
            tracing::info!(
                max_model_len,
                original_context = long.original_context,
                "the served context exceeds the original one: RoPE rotates by the long-context factors"
            );
        }
        if factors != self.config.rope.freq_factors {
            self.config.rope.freq_factors = factors;
            self.ropes = Self::ropes_for(&self.config, self.config.max_position_embeddings);
        }
    }

    /// Chooses the attention implementation (the fused paged kernel by default).
    pub fn set_attention_kernel(&mut self, kernel: AttentionKernel) {
        self.exact_attention = kernel == AttentionKernel::CandleMirror;
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The projections' bytes and multiply-adds per token (`footprint`).
    pub fn weight_footprint(&self) -> WeightFootprint {
        let layers = self.layers.iter().flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]);
        WeightFootprint::from_costs(layers.map(|p| p.cost(false)).chain([self.lm_head.cost(true)]))
    }

    /// Per layer, the constant part of its keys that an 8-bit cache should not quantize
    /// (`kv_q8`): the key bias rotated to every position and averaged (`Rope::mean_rotation`),
    /// where the keys get a bias and no norm after it; `None` elsewhere.
    pub fn key_offsets(&self) -> Vec<Option<Arc<[f32]>>> {
        self.layers
            .iter()
            .map(|layer| {
                let bias = layer.wk.bias().filter(|_| layer.k_norm.is_none())?;
                Some(self.ropes[layer.rope].mean_rotation(bias, self.config.num_kv_heads).into())
            })
            .collect()
    }

    /// The token embedding table (how it is held, and lookups outside a forward).
    pub fn embedding(&self) -> &Embedding {
        &self.embedding
    }

    /// One step over `batch`.
    pub fn forward(&self, batch: &ForwardBatch, cache: &mut KvCache) -> Result<ForwardOutput> {
        self.forward_into(batch, cache, Vec::new())
    }

    /// `forward`, with the logits written into `logits_buffer`'s allocation (a previous
    /// step's `ForwardOutput::logits`).
    pub fn forward_into(
        &self,
        batch: &ForwardBatch,
        cache: &mut KvCache,
        logits_buffer: Vec<f32>,
    ) -> Result<ForwardOutput> {
        batch.validate(self.config.vocab_size, cache.num_slots(), cache.block_size(), cache.groups())?;
        let max_positions = self.ropes.iter().map(Rope::max_positions).min().unwrap_or(0);
        if let Some(&p) = batch.positions.iter().find(|&&p| p as usize >= max_positions) {
            return Err(ModelError::InvalidBatch(format!("position {p} beyond the model's {max_positions} positions")));
        }
        let cfg = &self.config;
        let rows = batch.num_rows();
        let eps = cfg.rms_norm_eps;
        let hidden = cfg.hidden_size;
        let mut x = self.embedding.gather(batch.input_ids.iter().map(|&t| t as usize))?;
        if let Some(scale) = cfg.embedding_scale {
            x.iter_mut().for_each(|v| *v *= scale);
        }
        let mut attn_metrics = vec![None; batch.seqs.len()];
        let last_layer = self.layers.len().saturating_sub(1);
        for (l, layer) in self.layers.iter().enumerate() {
            let shape = AttentionShape {
                num_heads: cfg.num_heads,
                num_kv_heads: cfg.num_kv_heads,
                head_dim: cfg.head_dim,
                block_size: cache.block_size(),
                scale: cfg.attention_scale,
                window: layer.window,
                kv_group: cache.groups().group_of(l),
            };
            let h = ops::rms_norm(&x, &layer.attn_norm, eps);
            let [mut q, mut k, v] = Linear::forward_many([&layer.wq, &layer.wk, &layer.wv], &h, rows)?;
            if let Some(w) = &layer.q_norm {
                q = ops::rms_norm(&q, w, eps);
            }
            if let Some(w) = &layer.k_norm {
                k = ops::rms_norm(&k, w, eps);
            }
            let rope = &self.ropes[layer.rope];
            rope.apply(&mut q, cfg.num_heads, &batch.positions);
            rope.apply(&mut k, cfg.num_kv_heads, &batch.positions);
            let step = cache.step_rows(l, k, v);
            cache.store(l, &batch.slot_mappings[cache.groups().group_of(l)], &step)?;
            let (attn, metrics) = if self.exact_attention {
                exact_attention(shape, &q, &step, cache.layer(l), &batch.seqs, l == last_layer)?
            } else {
                paged_attention(shape, &q, &step, cache.layer(l), &batch.seqs, l == last_layer)?
            };
            if l == last_layer {
                attn_metrics = metrics;
            }
            let mut attn_out = layer.wo.forward(&attn, rows)?;
            if let Some(w) = &layer.post_attn_norm {
                attn_out = ops::rms_norm(&attn_out, w, eps);
            }
            ops::add_in_place(&mut x, &attn_out);
            let h = ops::rms_norm(&x, &layer.ffn_norm, eps);
            let [mut gate, up] = Linear::forward_many([&layer.w_gate, &layer.w_up], &h, rows)?;
            match cfg.activation {
                Activation::Silu => ops::silu_mul(&mut gate, &up),
                Activation::GeluTanh => ops::gelu_tanh_mul(&mut gate, &up),
            }
            let mut mlp_out = layer.w_down.forward(&gate, rows)?;
            if let Some(w) = &layer.post_ffn_norm {
                mlp_out = ops::rms_norm(&mlp_out, w, eps);
            }
            ops::add_in_place(&mut x, &mlp_out);
        }
        let logits = if batch.logits_rows.is_empty() {
            Vec::new()
        } else {
            let h = ops::gather_rows(&x, hidden, batch.logits_rows.iter().copied())?;
            let h = ops::rms_norm(&h, &self.final_norm, eps);
            let mut logits = self.lm_head.forward_into(&h, batch.logits_rows.len(), logits_buffer)?;
            if let Some(cap) = cfg.final_logit_softcap {
                logits.iter_mut().for_each(|v| *v = (*v / cap).tanh() * cap);
            }
            logits
        };
        Ok(ForwardOutput { logits, vocab_size: cfg.vocab_size, attn_metrics })
    }
}
