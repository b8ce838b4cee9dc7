use std::io::{Read, Seek};

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};

use crate::attention::{paged_attention, AttentionShape};
use crate::attention_exact::exact_attention;
use crate::batch::ForwardBatch;
use crate::config::ModelConfig;
use crate::embedding::Embedding;
use crate::error::{ModelError, Result};
use crate::int8_gemm;
use crate::kv_cache::{KvCache, LayerKv};
use crate::linear::{AttentionKernel, Linear, MatmulMode};
use crate::metrics::AttnMetrics;
use crate::ops;
use crate::rope::Rope;

// Hugging Face safetensors loading builds `Model`/`Layer` directly, so it lives in a child module.
mod hf_weights;

struct Layer {
    attn_norm: Vec<f32>,
    wq: Linear,
    wk: Linear,
    wv: Linear,
    wo: Linear,
    /// Qwen3 QK-norm weights (`[head_dim]`), applied to every head before RoPE.
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    ffn_norm: Vec<f32>,
    w_gate: Linear,
    w_up: Linear,
    w_down: Linear,
}

/// A decoder-only transformer (llama / qwen2 family) whose forward takes a packed varlen batch
/// with per-row positions and slot mapping, instead of candle-transformers' one-sequence,
/// one-position `forward(x, index_pos)` with its cache inside the model.
pub struct Model {
    config: ModelConfig,
    /// `[vocab, hidden]`, kept in its GGUF blocks where it can be (see `embedding.rs`).
    embedding: Embedding,
    layers: Vec<Layer>,
    final_norm: Vec<f32>,
    lm_head: Linear,
    rope: Rope,
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
    pub fn from_gguf<R: Read + Seek>(content: &gguf_file::Content, reader: &mut R, mode: MatmulMode) -> Result<Self> {
        let device = Device::Cpu;
        let config = ModelConfig::from_gguf(content)?;
        let mut tensor = |name: &str| {
            content
                .tensor(reader, name, &device)
                .map_err(|e| ModelError::Load { path: name.to_string(), message: e.to_string() })
        };
        let embedding = Embedding::from_qtensor(tensor("token_embd.weight")?)?;
        if embedding.hidden() != config.hidden_size {
            return Err(ModelError::Unsupported(format!(
                "token_embd.weight rows are {} wide, the model's hidden size is {}",
                embedding.hidden(),
                config.hidden_size
            )));
        }
        let final_norm = ops::values_of(&tensor("output_norm.weight")?.dequantize(&device)?)?;
        // A tied lm_head reads the embedding tensor a second time: `Linear` takes its weight
        // by value and, in the int8 mode, repacks it and drops it, while the embedding keeps
        // its own blocks (a few tens of MB) instead of an f32 copy of the table.
        // Asked of the index rather than tried: a failed read is a candle error that captures
        // a backtrace under RUST_BACKTRACE, and formatting it maps the binary's debug info
        // into memory (docs/benchmarks/notebook.md, "Memory: peak RSS against llama-server").
        let lm_head_weight = if content.tensor_infos.contains_key("output.weight") {
            tensor("output.weight")?
        } else {
            tensor("token_embd.weight")?
        };
        let lm_head = Linear::new(lm_head_weight, None, mode)?;
        let mut layers = Vec::with_capacity(config.num_layers);
        for l in 0..config.num_layers {
            let p = format!("blk.{l}");
            let mut bias = |name: &str| -> Result<Option<Tensor>> {
                if config.qkv_bias {
                    Ok(Some(tensor(&format!("{p}.{name}.bias"))?.dequantize(&device)?))
                } else {
                    Ok(None)
                }
            };
            let (bq, bk, bv) = (bias("attn_q")?, bias("attn_k")?, bias("attn_v")?);
            layers.push(Layer {
                attn_norm: ops::values_of(&tensor(&format!("{p}.attn_norm.weight"))?.dequantize(&device)?)?,
                wq: Linear::new(tensor(&format!("{p}.attn_q.weight"))?, bq, mode)?,
                wk: Linear::new(tensor(&format!("{p}.attn_k.weight"))?, bk, mode)?,
                wv: Linear::new(tensor(&format!("{p}.attn_v.weight"))?, bv, mode)?,
                wo: Linear::new(tensor(&format!("{p}.attn_output.weight"))?, None, mode)?,
                q_norm: None,
                k_norm: None,
                ffn_norm: ops::values_of(&tensor(&format!("{p}.ffn_norm.weight"))?.dequantize(&device)?)?,
                w_gate: Linear::new(tensor(&format!("{p}.ffn_gate.weight"))?, None, mode)?,
                w_up: Linear::new(tensor(&format!("{p}.ffn_up.weight"))?, None, mode)?,
                w_down: Linear::new(tensor(&format!("{p}.ffn_down.weight"))?, None, mode)?,
            });
            int8_gemm::release_freed_heap();
        }
        let rope =
            Rope::new(config.head_dim, config.rope_theta, config.max_position_embeddings, config.rope_interleaved);
        Ok(Self { config, embedding, layers, final_norm, lm_head, rope, exact_attention: false })
    }

    /// Chooses the attention implementation (the fused paged kernel by default).
    pub fn set_attention_kernel(&mut self, kernel: AttentionKernel) {
        self.exact_attention = kernel == AttentionKernel::CandleMirror;
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
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
        batch.validate(self.config.vocab_size, cache.num_slots(), cache.block_size())?;
        if let Some(&p) = batch.positions.iter().find(|&&p| p as usize >= self.rope.max_positions()) {
            return Err(ModelError::InvalidBatch(format!(
                "position {p} beyond the model's {} positions",
                self.rope.max_positions()
            )));
        }
        let cfg = &self.config;
        let rows = batch.num_rows();
        let eps = cfg.rms_norm_eps;
        let shape = AttentionShape {
            num_heads: cfg.num_heads,
            num_kv_heads: cfg.num_kv_heads,
            head_dim: cfg.head_dim,
            block_size: cache.block_size(),
        };
        let hidden = cfg.hidden_size;
        let mut x = self.embedding.gather(batch.input_ids.iter().map(|&t| t as usize))?;
        let mut attn_metrics = vec![None; batch.seqs.len()];
        let last_layer = self.layers.len().saturating_sub(1);
        for (l, layer) in self.layers.iter().enumerate() {
            let h = ops::rms_norm(&x, &layer.attn_norm, eps);
            let [mut q, mut k, v] = Linear::forward_many([&layer.wq, &layer.wk, &layer.wv], &h, rows)?;
            if let Some(w) = &layer.q_norm {
                q = ops::rms_norm(&q, w, eps);
            }
            if let Some(w) = &layer.k_norm {
                k = ops::rms_norm(&k, w, eps);
            }
            self.rope.apply(&mut q, cfg.num_heads, &batch.positions);
            self.rope.apply(&mut k, cfg.num_kv_heads, &batch.positions);
            let step = LayerKv::from_rows(cache.dtype(), k, v);
            cache.store(l, &batch.slot_mapping, &step)?;
            let (attn, metrics) = if self.exact_attention {
                exact_attention(shape, &q, &step, cache.layer(l), &batch.seqs, l == last_layer)?
            } else {
                paged_attention(shape, &q, &step, cache.layer(l), &batch.seqs, l == last_layer)?
            };
            if l == last_layer {
                attn_metrics = metrics;
            }
            ops::add_in_place(&mut x, &layer.wo.forward(&attn, rows)?);
            let h = ops::rms_norm(&x, &layer.ffn_norm, eps);
            let [mut gate, up] = Linear::forward_many([&layer.w_gate, &layer.w_up], &h, rows)?;
            ops::silu_mul(&mut gate, &up);
            ops::add_in_place(&mut x, &layer.w_down.forward(&gate, rows)?);
        }
        let logits = if batch.logits_rows.is_empty() {
            Vec::new()
        } else {
            let h = ops::gather_rows(&x, hidden, batch.logits_rows.iter().copied())?;
            let h = ops::rms_norm(&h, &self.final_norm, eps);
            self.lm_head.forward_into(&h, batch.logits_rows.len(), logits_buffer)?
        };
        Ok(ForwardOutput { logits, vocab_size: cfg.vocab_size, attn_metrics })
    }
}
