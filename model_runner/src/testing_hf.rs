//! Tiny random-weight checkpoints in Hugging Face layout for tests: `config.json`,
//! `model.safetensors` (or shards plus `model.safetensors.index.json`), `tokenizer.json`,
//! `tokenizer_config.json` and `generation_config.json`, with the tensor names and shapes of
//! real Qwen2.5 / Qwen3 / llama / WeDLM checkpoints, written in milliseconds.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Tensor};
use serde_json::{json, Value};

use crate::testing::{write_tiny_gguf, TinyModelSpec, WeightRng, TINY_VOCAB_SIZE};
use crate::tokenizer::chat_template::CHATML_TEMPLATE;
use crate::tokenizer::Tokenizer;

/// The last id of the tiny vocabulary (an unused `[PAD]` slot): the tiny WeDLM mask token.
pub const TINY_MASK_TOKEN_ID: u32 = TINY_VOCAB_SIZE as u32 - 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TinyHfArch {
    Llama,
    /// QKV bias, no QK-norm (Qwen2.5, WeDLM-7B).
    Qwen2,
    /// QK-norm, no bias, explicit `head_dim` (Qwen3, WeDLM-8B).
    Qwen3,
}

#[derive(Clone, Debug)]
pub struct TinyHfSpec {
    pub arch: TinyHfArch,
    pub hidden: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// Written to `config.json` for Qwen3; may differ from `hidden / n_heads` as in Qwen3-0.6B.
    pub head_dim: usize,
    pub intermediate: usize,
    pub context_length: usize,
    pub seed: u64,
    /// Storage dtype of every tensor (BF16 or F32).
    pub dtype: DType,
    pub tie_word_embeddings: bool,
    /// 1 writes `model.safetensors`; more writes that many shards plus the index.
    pub shards: usize,
    /// `mask_token_id` in `config.json`; `None` leaves the key out.
    pub mask_token_id: Option<u32>,
    /// `model_type: "wedlm"` (with `qk_norm` / `attention_bias` flags) instead of the plain family.
    pub wedlm_model_type: bool,
    /// Rows of the embedding and `lm_head` (`vocab_size` in `config.json`); the tokenizer stays
    /// the tiny one, as real Qwen checkpoints pad their 151,665 tokens to 151,936 rows.
    pub vocab_size: usize,
    /// Standard deviation of `lm_head`: larger gives peakier, lower-entropy logits.
    pub output_std: f32,
    /// Standard deviation of the attention and MLP projections: larger lets the context
    /// outweigh the token's own embedding (more varied greedy continuations).
    pub proj_std: f32,
}

impl TinyHfSpec {
    pub fn qwen3() -> Self {
        Self {
            arch: TinyHfArch::Qwen3,
            hidden: 64,
            n_layers: 2,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 32,
            intermediate: 128,
            context_length: 512,
            seed: 0,
            dtype: DType::BF16,
            tie_word_embeddings: false,
            shards: 1,
            mask_token_id: Some(TINY_MASK_TOKEN_ID),
            wedlm_model_type: true,
            vocab_size: TINY_VOCAB_SIZE,
            output_std: 0.25,
            proj_std: 0.08,
        }
    }

    pub fn qwen2() -> Self {
        Self { arch: TinyHfArch::Qwen2, head_dim: 16, ..Self::qwen3() }
    }

    pub fn llama() -> Self {
        Self { arch: TinyHfArch::Llama, head_dim: 16, mask_token_id: None, wedlm_model_type: false, ..Self::qwen3() }
    }
}

/// Writes the checkpoint files into `dir` (created if needed).
pub fn write_tiny_hf(dir: &Path, spec: &TinyHfSpec) -> candle_core::Result<()> {
    if spec.arch != TinyHfArch::Qwen3 && spec.head_dim * spec.n_heads != spec.hidden {
        candle_core::bail!("head_dim must be hidden / n_heads outside Qwen3");
    }
    std::fs::create_dir_all(dir)?;
    let tokenizer = tiny_tokenizer(dir)?;
    tokenizer
        .tokenizer
        .save(dir.join("tokenizer.json"), false)
        .map_err(|e| candle_core::Error::Msg(format!("tokenizer.json: {e}")))?;
    let id = |t: &str| tokenizer.token_id(t).ok_or_else(|| candle_core::Error::Msg(format!("tiny vocab lacks {t}")));
    let (endoftext, im_end) = (id("<|endoftext|>")?, id("<|im_end|>")?);
    write_json(&dir.join("config.json"), &config_json(spec, endoftext, im_end))?;
    write_json(
        &dir.join("tokenizer_config.json"),
        &json!({
            "add_bos_token": false,
            "bos_token": null,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "chat_template": CHATML_TEMPLATE,
            "model_max_length": spec.context_length,
        }),
    )?;
    write_json(&dir.join("generation_config.json"), &json!({ "eos_token_id": [im_end, endoftext] }))?;
    write_weights(dir, spec)
}

/// The tiny byte-level BPE vocabulary (Qwen layout) that the tiny GGUF models carry.
fn tiny_tokenizer(dir: &Path) -> candle_core::Result<Tokenizer> {
    let tmp = dir.join(".tokenizer-source.gguf");
    write_tiny_gguf(&tmp, &TinyModelSpec::qwen2())?;
    let mut file = std::fs::File::open(&tmp)?;
    let content = candle_core::quantized::gguf_file::Content::read(&mut file)?;
    let tokenizer = Tokenizer::from_gguf(&content).map_err(|e| candle_core::Error::Msg(e.to_string()));
    std::fs::remove_file(&tmp)?;
    tokenizer
}

fn config_json(spec: &TinyHfSpec, bos: u32, eos: u32) -> Value {
    let (model_type, class) = match (spec.arch, spec.wedlm_model_type) {
        (TinyHfArch::Llama, _) => ("llama", "LlamaForCausalLM"),
        (_, true) => ("wedlm", "WeDLMForCausalLM"),
        (TinyHfArch::Qwen2, false) => ("qwen2", "Qwen2ForCausalLM"),
        (TinyHfArch::Qwen3, false) => ("qwen3", "Qwen3ForCausalLM"),
    };
    let qwen = spec.arch != TinyHfArch::Llama;
    let mut c = json!({
        "architectures": [class],
        "model_type": model_type,
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "num_hidden_layers": spec.n_layers,
        "num_attention_heads": spec.n_heads,
        "num_key_value_heads": spec.n_kv_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.context_length,
        "rope_theta": if qwen { 1_000_000.0 } else { 10_000.0 },
        "rms_norm_eps": if qwen { 1e-6 } else { 1e-5 },
        "tie_word_embeddings": spec.tie_word_embeddings,
        "attention_bias": spec.arch == TinyHfArch::Qwen2,
        "hidden_act": "silu",
        "rope_scaling": null,
        "sliding_window": spec.context_length,
        "max_window_layers": spec.n_layers,
        "use_sliding_window": false,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": if spec.dtype == DType::BF16 { "bfloat16" } else { "float32" },
    });
    if spec.wedlm_model_type {
        c["qk_norm"] = json!(spec.arch == TinyHfArch::Qwen3);
    }
    if let Some(id) = spec.mask_token_id {
        c["mask_token_id"] = json!(id);
    }
    c
}

fn write_weights(dir: &Path, spec: &TinyHfSpec) -> candle_core::Result<()> {
    let tensors = build_tensors(spec)?;
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    if spec.shards <= 1 {
        return candle_core::safetensors::save(&tensors, dir.join("model.safetensors"));
    }
    let per_shard = names.len().div_ceil(spec.shards);
    let mut weight_map = serde_json::Map::new();
    for (i, chunk) in names.chunks(per_shard).enumerate() {
        let file = format!("model-{:05}-of-{:05}.safetensors", i + 1, spec.shards);
        let shard: HashMap<String, Tensor> = chunk.iter().map(|n| ((*n).clone(), tensors[*n].clone())).collect();
        candle_core::safetensors::save(&shard, dir.join(&file))?;
        for n in chunk {
            weight_map.insert((*n).clone(), json!(file));
        }
    }
    write_json(&dir.join("model.safetensors.index.json"), &json!({ "metadata": {}, "weight_map": weight_map }))
}

fn build_tensors(spec: &TinyHfSpec) -> candle_core::Result<HashMap<String, Tensor>> {
    let mut rng = WeightRng::new(spec.seed ^ 0x4846_5F54_494E_5900);
    let (h, hd, ff, v) = (spec.hidden, spec.head_dim, spec.intermediate, spec.vocab_size);
    let (q, kv) = (spec.n_heads * hd, spec.n_kv_heads * hd);
    let mut out = HashMap::new();
    let mut put = |name: String, dims: &[usize], mean: f32, std: f32| -> candle_core::Result<()> {
        out.insert(name, rng.tensor(dims, mean, std)?.to_dtype(spec.dtype)?);
        Ok(())
    };
    put("model.embed_tokens.weight".into(), &[v, h], 0.0, 1.0)?;
    for l in 0..spec.n_layers {
        let p = |n: &str| format!("model.layers.{l}.{n}");
        put(p("input_layernorm.weight"), &[h], 1.0, 0.05)?;
        put(p("self_attn.q_proj.weight"), &[q, h], 0.0, spec.proj_std)?;
        put(p("self_attn.k_proj.weight"), &[kv, h], 0.0, spec.proj_std)?;
        put(p("self_attn.v_proj.weight"), &[kv, h], 0.0, spec.proj_std)?;
        put(p("self_attn.o_proj.weight"), &[h, q], 0.0, spec.proj_std)?;
        if spec.arch == TinyHfArch::Qwen2 {
            put(p("self_attn.q_proj.bias"), &[q], 0.0, 0.05)?;
            put(p("self_attn.k_proj.bias"), &[kv], 0.0, 0.05)?;
            put(p("self_attn.v_proj.bias"), &[kv], 0.0, 0.05)?;
        }
        if spec.arch == TinyHfArch::Qwen3 {
            put(p("self_attn.q_norm.weight"), &[hd], 1.0, 0.1)?;
            put(p("self_attn.k_norm.weight"), &[hd], 1.0, 0.1)?;
        }
        put(p("post_attention_layernorm.weight"), &[h], 1.0, 0.05)?;
        put(p("mlp.gate_proj.weight"), &[ff, h], 0.0, spec.proj_std)?;
        put(p("mlp.up_proj.weight"), &[ff, h], 0.0, spec.proj_std)?;
        put(p("mlp.down_proj.weight"), &[h, ff], 0.0, spec.proj_std)?;
    }
    put("model.norm.weight".into(), &[h], 1.0, 0.05)?;
    if !spec.tie_word_embeddings {
        put("lm_head.weight".into(), &[v, h], 0.0, spec.output_std)?;
    }
    Ok(out)
}

fn write_json(path: &Path, value: &Value) -> candle_core::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    std::fs::write(path, text)?;
    Ok(())
}
