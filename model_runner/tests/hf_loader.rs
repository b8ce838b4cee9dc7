//! Hugging Face checkpoint directories: generated tiny Qwen3 / Qwen2 / llama checkpoints load
//! through `load_model` and give the logits of candle-transformers' own models of those
//! families (an independent implementation reading the same safetensors).

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{llama, qwen2, qwen3};
use entrobatch_model_runner::hf_config::{HfConfig, DEFAULT_MASK_TOKEN_ID};
use entrobatch_model_runner::testing::prompt_chunk;
use entrobatch_model_runner::testing_hf::{write_tiny_hf, TinyHfArch, TinyHfSpec, TINY_MASK_TOKEN_ID};
use entrobatch_model_runner::{load_model, Architecture, KvDtype, MatmulMode, ModelError, ModelRunner};

fn checkpoint(name: &str, spec: &TinyHfSpec) -> PathBuf {
    let dir = entrobatch_model_runner::testing::unique_test_path(env!("CARGO_TARGET_TMPDIR"), &format!("hf-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    write_tiny_hf(&dir, spec).expect("write tiny checkpoint");
    dir
}

const PROMPT: &[u32] = &[45, 7, 300, 12, 99, 281, 3, 150, 77, 64, 201, 18, 5];

/// Last-row logits from our runner: the prompt in two chunks, so the second reads the first
/// chunk's K/V back through the paged cache.
fn ours(dir: &Path, tokens: &[u32]) -> Vec<f32> {
    let (model, _) = load_model(dir, MatmulMode::default()).expect("load");
    let mut runner = ModelRunner::new(model, 4, 16, KvDtype::F32).expect("runner");
    let split = tokens.len() / 2;
    let mut step = |range: std::ops::Range<usize>, want_logits: bool| {
        let logits_rows = if want_logits { vec![range.len() - 1] } else { Vec::new() };
        runner.execute(&prompt_chunk(tokens, range, vec![0, 1, 2, 3], logits_rows)).expect("forward").logits
    };
    step(0..split, false);
    step(split..tokens.len(), true)
}

fn reference(dir: &Path, arch: TinyHfArch, tokens: &[u32]) -> Vec<f32> {
    let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    // SAFETY: test files written above and not modified while mapped.
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&files, DType::F32, &Device::Cpu) }.unwrap();
    let input = Tensor::new(tokens, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    let logits = match arch {
        TinyHfArch::Qwen3 => {
            let cfg: qwen3::Config = serde_json::from_str(&config).unwrap();
            qwen3::ModelForCausalLM::new(&cfg, vb).unwrap().forward(&input, 0).unwrap()
        }
        TinyHfArch::Qwen2 => {
            let cfg: qwen2::Config = serde_json::from_str(&config).unwrap();
            qwen2::ModelForCausalLM::new(&cfg, vb).unwrap().forward(&input, 0).unwrap()
        }
        TinyHfArch::Llama => {
            let cfg: llama::LlamaConfig = serde_json::from_str(&config).unwrap();
            let cfg = cfg.into_config(false);
            let model = llama::Llama::load(vb, &cfg).unwrap();
            let mut cache = llama::Cache::new(false, DType::F32, &cfg, &Device::Cpu).unwrap();
            model.forward(&input, 0, &mut cache).unwrap()
        }
    };
    logits.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

fn assert_close(name: &str, ours: &[f32], theirs: &[f32]) {
    assert_eq!(ours.len(), theirs.len(), "{name}: vocab");
    let max_diff = ours.iter().zip(theirs).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    let scale = theirs.iter().map(|x| x.abs()).fold(0f32, f32::max);
    assert!(scale > 0.5, "{name}: degenerate reference logits");
    assert!(max_diff < 1e-4 * scale.max(1.0), "{name}: max |diff| {max_diff} (logit scale {scale})");
}

#[test]
fn qwen3_bf16_with_qk_norm_and_wide_heads_matches_candle_transformers() {
    // head_dim 32 with 4 heads of a 64-wide model: q_proj is 128 x 64, as in Qwen3-0.6B.
    let spec = TinyHfSpec::qwen3();
    let dir = checkpoint("qwen3", &spec);
    let (model, _) = load_model(&dir, MatmulMode::default()).unwrap();
    let cfg = model.config();
    assert_eq!(cfg.architecture, Architecture::Qwen3);
    assert!(cfg.qk_norm && !cfg.qkv_bias && !cfg.rope.interleaved);
    assert_eq!((cfg.head_dim, cfg.mask_token_id), (32, Some(TINY_MASK_TOKEN_ID)));
    assert_close("qwen3", &ours(&dir, PROMPT), &reference(&dir, TinyHfArch::Qwen3, PROMPT));
}

#[test]
fn qwen2_sharded_tied_f32_with_bias_matches_candle_transformers() {
    let spec = TinyHfSpec {
        shards: 3,
        tie_word_embeddings: true,
        dtype: DType::F32,
        wedlm_model_type: false,
        mask_token_id: None,
        seed: 7,
        ..TinyHfSpec::qwen2()
    };
    let dir = checkpoint("qwen2", &spec);
    assert!(dir.join("model.safetensors.index.json").is_file());
    assert!(!dir.join("model.safetensors").exists());
    let (model, _) = load_model(&dir, MatmulMode::default()).unwrap();
    let cfg = model.config();
    assert_eq!(cfg.architecture, Architecture::Qwen2);
    assert!(cfg.qkv_bias && !cfg.qk_norm);
    // No mask_token_id and a vocabulary too small for the 151665 fallback.
    assert_eq!(cfg.mask_token_id, None);
    assert_close("qwen2", &ours(&dir, PROMPT), &reference(&dir, TinyHfArch::Qwen2, PROMPT));
}

#[test]
fn llama_hf_layout_uses_neox_rope_and_matches_candle_transformers() {
    let spec = TinyHfSpec { seed: 3, ..TinyHfSpec::llama() };
    let dir = checkpoint("llama", &spec);
    let (model, _) = load_model(&dir, MatmulMode::default()).unwrap();
    assert_eq!(model.config().architecture, Architecture::Llama);
    assert_close("llama", &ours(&dir, PROMPT), &reference(&dir, TinyHfArch::Llama, PROMPT));
}

#[test]
fn wedlm_qwen2_checkpoint_loads_as_qwen2_with_its_mask_token() {
    let dir = checkpoint("wedlm-qwen2", &TinyHfSpec { seed: 11, ..TinyHfSpec::qwen2() });
    let (model, _) = load_model(&dir, MatmulMode::default()).unwrap();
    let cfg = model.config();
    assert_eq!(cfg.architecture, Architecture::Qwen2);
    assert!(cfg.qkv_bias && !cfg.qk_norm);
    assert_eq!(cfg.mask_token_id, Some(TINY_MASK_TOKEN_ID));
    assert_close("wedlm-qwen2", &ours(&dir, PROMPT), &reference(&dir, TinyHfArch::Qwen2, PROMPT));
}

#[test]
fn tokenizer_json_round_trips_and_carries_eos_and_template() {
    let dir = checkpoint("tokenizer", &TinyHfSpec::qwen3());
    let (_, tok) = load_model(&dir, MatmulMode::default()).unwrap();
    let im_end = tok.token_id("<|im_end|>").unwrap();
    let endoftext = tok.token_id("<|endoftext|>").unwrap();
    assert_eq!(tok.eos_token_ids[0], im_end, "tokenizer_config's eos_token comes first");
    assert!(tok.eos_token_ids.contains(&endoftext));
    assert_eq!(tok.bos_token_id, None, "an explicit null bos_token means none");
    assert!(tok.chat_template.as_deref().is_some_and(|t| t.contains("<|im_start|>")));
    assert!(tok.is_special(im_end) && !tok.is_special(40));
    let text = "<|im_start|>user\nHello world, the cat<|im_end|>";
    let ids = tok.encode(text, false).unwrap();
    assert_eq!(ids[0], tok.token_id("<|im_start|>").unwrap());
    assert!(ids.contains(&tok.token_id("Hello").unwrap()));
    assert_eq!(tok.decode(&ids, false).unwrap(), text);
}

#[test]
fn real_wedlm_8b_style_config_parses() {
    // Field set of a WeDLM-8B / Qwen3-8B config.json, without mask_token_id: the fallback applies.
    let text = r#"{
        "architectures": ["WeDLMForCausalLM"], "model_type": "wedlm", "attention_bias": false,
        "qk_norm": true, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
        "max_position_embeddings": 16384, "rope_theta": 1000000, "rms_norm_eps": 1e-06,
        "rope_scaling": null, "tie_word_embeddings": false, "bos_token_id": 151643,
        "eos_token_id": [151645, 151643], "torch_dtype": "bfloat16", "hidden_act": "silu"
    }"#;
    let cfg = HfConfig::parse(text).unwrap();
    let m = &cfg.model;
    assert_eq!(m.architecture, Architecture::Qwen3);
    assert!(m.qk_norm && !m.qkv_bias);
    assert_eq!((m.num_heads, m.num_kv_heads, m.head_dim, m.num_layers), (32, 8, 128, 36));
    assert_eq!(m.mask_token_id, Some(DEFAULT_MASK_TOKEN_ID));
    assert_eq!(m.rope.theta, 1e6);
    assert_eq!(cfg.eos_token_ids, vec![151645, 151643]);
    let with_mask = text.replace("\"qk_norm\"", "\"mask_token_id\": 151666, \"qk_norm\"");
    assert_eq!(HfConfig::parse(&with_mask).unwrap().model.mask_token_id, Some(151_666));
    // The same fields as a stock Qwen3-8B: 151665 is an ordinary token there (Qwen3's
    // `<tool_response>`), so no fallback; the model class alone also marks a WeDLM checkpoint.
    let stock = text.replace("\"WeDLMForCausalLM\"", "\"Qwen3ForCausalLM\"").replace("\"wedlm\"", "\"qwen3\"");
    assert_eq!(HfConfig::parse(&stock).unwrap().model.mask_token_id, None);
    let by_class = text.replace("\"model_type\": \"wedlm\"", "\"model_type\": \"qwen3\"");
    assert_eq!(HfConfig::parse(&by_class).unwrap().model.mask_token_id, Some(DEFAULT_MASK_TOKEN_ID));
    let scaled = text.replace("\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}");
    assert!(matches!(HfConfig::parse(&scaled), Err(ModelError::Unsupported(m)) if m.contains("rope_scaling")));
}

#[test]
fn broken_checkpoints_fail_with_the_tensor_named() {
    let dir = checkpoint("broken", &TinyHfSpec { dtype: DType::F32, ..TinyHfSpec::qwen3() });
    let config_path = dir.join("config.json");
    let config = std::fs::read_to_string(&config_path).unwrap();
    // A Qwen2 config on Qwen3 weights: the QKV biases it implies are missing.
    std::fs::write(&config_path, config.replace("\"attention_bias\": false", "\"attention_bias\": true")).unwrap();
    let err = load_model(&dir, MatmulMode::default()).err().expect("must fail").to_string();
    assert!(err.contains("model.layers.0.self_attn.q_proj.bias"), "{err}");
    // A wrong width: every projection's shape disagrees with the config.
    std::fs::write(&config_path, config.replace("\"intermediate_size\": 128", "\"intermediate_size\": 96")).unwrap();
    let err = load_model(&dir, MatmulMode::default()).err().expect("must fail").to_string();
    assert!(err.contains("mlp.gate_proj.weight") && err.contains("[96, 64]"), "{err}");
    // Untied config without lm_head.
    let tied_dir = checkpoint("untied", &TinyHfSpec { tie_word_embeddings: true, ..TinyHfSpec::qwen3() });
    let tied_cfg = std::fs::read_to_string(tied_dir.join("config.json")).unwrap();
    std::fs::write(
        tied_dir.join("config.json"),
        tied_cfg.replace("\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false"),
    )
    .unwrap();
    let err = load_model(&tied_dir, MatmulMode::default()).err().expect("must fail").to_string();
    assert!(err.contains("lm_head.weight"), "{err}");
    std::fs::remove_file(tied_dir.join("model.safetensors")).unwrap();
    let err = load_model(&tied_dir, MatmulMode::default()).err().expect("must fail").to_string();
    assert!(err.contains("model.safetensors"), "{err}");
}
