//! Builds a [`Model`] from Hugging Face tensor names (`model.layers.N.self_attn.q_proj.weight`,
//! ...). A child of `model` so it can fill `Model`'s private fields directly.

use super::{Layer, Model};
use crate::config::Architecture;
use crate::embedding::Embedding;
use crate::error::{ModelError, Result};
use crate::hf_config::HfConfig;
use crate::hf_loader::HfTensors;
use crate::linear::Linear;
use crate::ops;

impl Model {
    /// Every weight becomes dense f32. The bias and QK-norm tensors the config implies must be
    /// present; ones it does not imply but the checkpoint has are used too (a WeDLM config
    /// may leave `attention_bias` / `qk_norm` implicit).
    pub(crate) fn from_hf(hf: HfConfig, tensors: &HfTensors) -> Result<Self> {
        let mut config = hf.model;
        let first = "model.layers.0.self_attn";
        config.qkv_bias |= tensors.contains(&format!("{first}.q_proj.bias"));
        config.qk_norm |= tensors.contains(&format!("{first}.q_norm.weight"));
        if config.qk_norm && config.architecture == Architecture::Qwen2 {
            config.architecture = Architecture::Qwen3;
        }
        let (h, hd, ff, v) = (config.hidden_size, config.head_dim, config.intermediate_size, config.vocab_size);
        let (q_out, kv_out) = (config.num_heads * hd, config.num_kv_heads * hd);

        let embedding = tensors.get("model.embed_tokens.weight", &[v, h])?;
        let mut layers = Vec::with_capacity(config.num_layers);
        for l in 0..config.num_layers {
            let p = format!("model.layers.{l}");
            let get = |name: &str, dims: &[usize]| tensors.get(&format!("{p}.{name}"), dims);
            let bias = |name: &str, out: usize| -> Result<_> {
                config.qkv_bias.then(|| get(&format!("self_attn.{name}.bias"), &[out])).transpose()
            };
            let norm = |name: &str| -> Result<_> {
                config.qk_norm.then(|| ops::values_of(&get(&format!("self_attn.{name}.weight"), &[hd])?)).transpose()
            };
            let proj = |name: &str, out: usize, inp: usize, bias| Linear::from_dense(&get(name, &[out, inp])?, bias);
            layers.push(Layer {
                attn_norm: ops::values_of(&get("input_layernorm.weight", &[h])?)?,
                wq: proj("self_attn.q_proj.weight", q_out, h, bias("q_proj", q_out)?)?,
                wk: proj("self_attn.k_proj.weight", kv_out, h, bias("k_proj", kv_out)?)?,
                wv: proj("self_attn.v_proj.weight", kv_out, h, bias("v_proj", kv_out)?)?,
                wo: proj("self_attn.o_proj.weight", h, q_out, None)?,
                q_norm: norm("q_norm")?,
                k_norm: norm("k_norm")?,
                post_attn_norm: None,
                ffn_norm: ops::values_of(&get("post_attention_layernorm.weight", &[h])?)?,
                w_gate: proj("mlp.gate_proj.weight", ff, h, None)?,
                w_up: proj("mlp.up_proj.weight", ff, h, None)?,
                w_down: proj("mlp.down_proj.weight", h, ff, None)?,
                post_ffn_norm: None,
                window: None,
                rope: 0,
            });
        }
        let final_norm = ops::values_of(&tensors.get("model.norm.weight", &[h])?)?;
        let lm_head = if tensors.contains("lm_head.weight") {
            Linear::from_dense(&tensors.get("lm_head.weight", &[v, h])?, None)?
        } else if hf.tie_word_embeddings {
            Linear::from_dense(&embedding, None)?
        } else {
            return Err(ModelError::Unsupported("lm_head.weight is missing and tie_word_embeddings is false".into()));
        };
        let ropes = Model::ropes_for(&config, config.max_position_embeddings);
        let embedding = Embedding::from_dense(ops::values_of(&embedding)?, h)?;
        Ok(Self { config, embedding, layers, final_norm, lm_head, ropes, exact_attention: false })
    }
}
