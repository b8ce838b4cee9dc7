//! Builds a [`Model`] from llama.cpp's GGUF tensor names (`blk.N.attn_q.weight`, ...), for
//! every family [`ModelConfig::from_gguf`] describes: fused QKV and gate/up tensors (Phi-3)
//! are split by rows into the separate projections the forward runs, so no family needs a
//! forward of its own.

use std::io::{Read, Seek};

use candle_core::quantized::{ggml_file::qtensor_from_ggml, gguf_file, QTensor};
use candle_core::{Device, Tensor};

use super::{Layer, Model};
use crate::config::{LongContextRope, ModelConfig};
use crate::embedding::Embedding;
use crate::error::{ModelError, Result};
use crate::int8_gemm;
use crate::linear::{Linear, MatmulMode};
use crate::ops;

impl Model {
    pub fn from_gguf<R: Read + Seek>(content: &gguf_file::Content, reader: &mut R, mode: MatmulMode) -> Result<Self> {
        let device = Device::Cpu;
        let mut config = ModelConfig::from_gguf(content)?;
        let has = |name: &str| content.tensor_infos.contains_key(name);
        let mut tensor = |name: &str| {
            content
                .tensor(reader, name, &device)
                .map_err(|e| ModelError::Load { path: name.to_string(), message: e.to_string() })
        };
        let rotary_dim = config.rope.rotary_dim;
        let mut factors = |name: &str| -> Result<Option<Vec<f32>>> {
            if !has(name) {
                return Ok(None);
            }
            let values = ops::values_of(&tensor(name)?.dequantize(&device)?)?;
            if values.len() != rotary_dim / 2 {
                return Err(ModelError::Unsupported(format!(
                    "{name} has {} factors for a rotary dimension of {}",
                    values.len(),
                    rotary_dim
                )));
            }
            Ok(Some(values))
        };
        if let Some(all) = factors(ModelConfig::ROPE_FACTORS)? {
            config.rope.freq_factors = Some(all);
        } else if let Some(long_factors) = factors(ModelConfig::ROPE_FACTORS_LONG)? {
            let long = LongContextRope {
                original_context: ModelConfig::original_context_length(content)?,
                short_factors: factors(ModelConfig::ROPE_FACTORS_SHORT)?,
                long_factors,
            };
            config.rope.freq_factors = long.factors_for(config.max_position_embeddings).map(<[f32]>::to_vec);
            config.long_context_rope = Some(long);
        } else {
            config.rope.freq_factors = factors(ModelConfig::ROPE_FACTORS_SHORT)?;
        }
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
        let lm_head_weight = if has("output.weight") { tensor("output.weight")? } else { tensor("token_embd.weight")? };
        let lm_head = Linear::new(lm_head_weight, None, mode)?;
        let (q_rows, kv_rows) = (config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim);
        let ff = config.intermediate_size;
        let mut layers = Vec::with_capacity(config.num_layers);
        for l in 0..config.num_layers {
            let name = |n: &str| format!("blk.{l}.{n}");
            let mut vector = |n: &str| -> Result<Vec<f32>> { ops::values_of(&tensor(&name(n))?.dequantize(&device)?) };
            let attn_norm = vector("attn_norm.weight")?;
            let ffn_norm = vector("ffn_norm.weight")?;
            let (q_norm, k_norm) = if config.qk_norm {
                (Some(vector("attn_q_norm.weight")?), Some(vector("attn_k_norm.weight")?))
            } else {
                (None, None)
            };
            let (post_attn_norm, post_ffn_norm) = if config.sandwich_norms {
                (Some(vector("post_attention_norm.weight")?), Some(vector("post_ffw_norm.weight")?))
            } else {
                (None, None)
            };
            let qkv_sizes = [q_rows, kv_rows, kv_rows];
            let [wq, wk, wv] = if has(&name("attn_qkv.weight")) {
                let [q, k, v] = split_rows(&tensor(&name("attn_qkv.weight"))?, qkv_sizes)?;
                let [bq, bk, bv] = match config.qkv_bias {
                    true => split_bias(&tensor(&name("attn_qkv.bias"))?.dequantize(&device)?, qkv_sizes)?.map(Some),
                    false => [None, None, None],
                };
                [Linear::new(q, bq, mode)?, Linear::new(k, bk, mode)?, Linear::new(v, bv, mode)?]
            } else {
                let mut projection = |n: &str| -> Result<Linear> {
                    let bias = match config.qkv_bias {
                        true => Some(tensor(&name(&format!("{n}.bias")))?.dequantize(&device)?),
                        false => None,
                    };
                    Linear::new(tensor(&name(&format!("{n}.weight")))?, bias, mode)
                };
                [projection("attn_q")?, projection("attn_k")?, projection("attn_v")?]
            };
            let wo = Linear::new(tensor(&name("attn_output.weight"))?, None, mode)?;
            let (w_gate, w_up) = if has(&name("ffn_gate.weight")) {
                let gate = Linear::new(tensor(&name("ffn_gate.weight"))?, None, mode)?;
                (gate, Linear::new(tensor(&name("ffn_up.weight"))?, None, mode)?)
            } else {
                // Fused gate and up (Phi-3): the gate's rows first, as ggml's `swiglu` splits them.
                let [gate, up] = split_rows(&tensor(&name("ffn_up.weight"))?, [ff, ff])?;
                (Linear::new(gate, None, mode)?, Linear::new(up, None, mode)?)
            };
            let w_down = Linear::new(tensor(&name("ffn_down.weight"))?, None, mode)?;
            let window = config.layer_window(l);
            layers.push(Layer {
                attn_norm,
                wq,
                wk,
                wv,
                wo,
                q_norm,
                k_norm,
                post_attn_norm,
                ffn_norm,
                w_gate,
                w_up,
                w_down,
                post_ffn_norm,
                window,
                rope: usize::from(window.is_some()),
            });
            int8_gemm::release_freed_heap();
        }
        let ropes = Model::ropes_for(&config, config.max_position_embeddings);
        Ok(Self { config, embedding, layers, final_norm, lm_head, ropes, exact_attention: false })
    }
}

/// Consecutive row ranges of a `[rows, cols]` quantized matrix, each still in its blocks
/// (quantization blocks never cross a row, so a row range is a byte range).
fn split_rows<const N: usize>(weight: &QTensor, sizes: [usize; N]) -> Result<[QTensor; N]> {
    let (rows, cols) = weight.shape().dims2()?;
    if sizes.iter().sum::<usize>() != rows {
        return Err(ModelError::Unsupported(format!("a fused weight of {rows} rows, expected {sizes:?}")));
    }
    let dtype = weight.dtype();
    let row_bytes = cols / dtype.block_size() * dtype.type_size();
    let data = weight.data()?;
    let mut start = 0;
    let mut parts = Vec::with_capacity(N);
    for n in sizes {
        let bytes = &data[start * row_bytes..(start + n) * row_bytes];
        parts.push(qtensor_from_ggml(dtype, bytes, vec![n, cols], &Device::Cpu)?);
        start += n;
    }
    parts.try_into().map_err(|_| ModelError::Unsupported("fused weight split".into()))
}

fn split_bias<const N: usize>(bias: &Tensor, sizes: [usize; N]) -> Result<[Tensor; N]> {
    let mut start = 0;
    let mut parts = Vec::with_capacity(N);
    for n in sizes {
        parts.push(bias.narrow(0, start, n)?);
        start += n;
    }
    parts.try_into().map_err(|_| ModelError::Unsupported("fused bias split".into()))
}
