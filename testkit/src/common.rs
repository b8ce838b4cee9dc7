//! Shared helpers for the integration tests: model paths, candle-transformers references,
//! tiny generated models.

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use candle_transformers::models::{gemma3, quantized_llama, quantized_phi3, quantized_qwen2, quantized_qwen3};
use entrobatch::model_runner::testing::{write_tiny_gguf, TinyModelSpec};
use entrobatch::model_runner::{ForwardBatch, KvCache, SeqSpan};
use entrobatch::{Engine, EngineConfig, GenerationParams, MatmulMode, Prompt, SamplingParams};

pub use crate::repo_root;

/// The default model; the test command fetches it first, so its absence is a failure.
pub fn smollm2_path() -> PathBuf {
    let path = repo_root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.is_file(),
        "{} missing: run `scripts/fetch-model smollm2` (the README's test command does)",
        path.display()
    );
    path
}

/// The second model is optional for tests: present only after `scripts/fetch-model qwen2.5-coder-0.5b`.
pub fn qwen_coder_path() -> Option<PathBuf> {
    let path = repo_root().join("models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    path.is_file().then_some(path)
}

/// One sequence's whole prompt as a single prefill from position 0 into `cache`, logits for
/// `logits_rows`. The cache's pages are split evenly between its KV cache groups, each group
/// holding its K/V in its own pages, in order.
pub fn prefill_batch(tokens: &[u32], cache: &KvCache, logits_rows: Vec<usize>) -> ForwardBatch {
    let n = tokens.len();
    let num_groups = cache.groups().num_groups();
    let per_group = cache.num_blocks() / num_groups;
    let first_slot = |g: usize| (g * per_group * cache.block_size()) as i64;
    ForwardBatch {
        input_ids: tokens.to_vec(),
        positions: (0..n as u32).collect(),
        slot_mappings: (0..num_groups).map(|g| (0..n as i64).map(|p| first_slot(g) + p).collect()).collect(),
        seqs: vec![SeqSpan {
            query_start: 0,
            query_len: n,
            context_len: 0,
            block_tables: (0..num_groups)
                .map(|g| ((g * per_group) as u32..((g + 1) * per_group) as u32).collect())
                .collect(),
            want_attn_metrics: false,
            attn_pad_to: None,
        }],
        logits_rows,
    }
}

/// Writes a tiny random-weight GGUF into a fresh temp dir and returns its path.
pub fn tiny_model(spec: &TinyModelSpec, name: &str) -> PathBuf {
    let dir = entrobatch::model_runner::testing::unique_test_path(crate::tmp_dir(), &format!("test-{name}"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{name}.gguf"));
    write_tiny_gguf(&path, spec).expect("write tiny gguf");
    path
}

/// The eval fixtures (a few items of each task), shared by eval's tests and the CLI's.
pub fn eval_fixtures() -> PathBuf {
    repo_root().join("eval/tests/fixtures/eval")
}

/// A tiny model whose context holds a HumanEval prompt in the tiny byte-level vocabulary.
pub fn tiny_eval_model(name: &str) -> PathBuf {
    tiny_model(&TinyModelSpec { context_length: 4096, ..TinyModelSpec::llama() }, name)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RefArch {
    Llama,
    Qwen2,
    Qwen3,
    Phi3,
    /// candle-transformers' Hugging Face Gemma 3 (`gemma3.rs`) over the GGUF's weights,
    /// dequantized and renamed: its quantized Gemma 3 runs SiLU where Gemma runs GELU and
    /// does not window decode steps, so it is no reference.
    Gemma3,
}

enum RefModel {
    Llama(quantized_llama::ModelWeights),
    Qwen2(quantized_qwen2::ModelWeights),
    Qwen3(quantized_qwen3::ModelWeights),
    Phi3(quantized_phi3::ModelWeights),
    Gemma3(gemma3::Model),
}

impl RefModel {
    fn forward(&mut self, x: &Tensor, pos: usize) -> Tensor {
        match self {
            Self::Llama(m) => m.forward(x, pos).expect("reference forward"),
            Self::Qwen2(m) => m.forward(x, pos).expect("reference forward"),
            Self::Qwen3(m) => m.forward(x, pos).expect("reference forward"),
            Self::Phi3(m) => m.forward(x, pos).expect("reference forward"),
            // One token at a time: candle's Gemma 3 prefill mask lets a windowed layer see one
            // key more than its window, its decode steps see exactly the window (as Gemma does).
            Self::Gemma3(m) => {
                let n = x.dim(1).expect("batch of tokens");
                let mut last = None;
                for i in 0..n {
                    let token = x.narrow(1, i, 1).expect("token");
                    last = Some(m.forward(&token, pos + i).expect("reference forward"));
                }
                last.expect("at least one token")
            }
        }
    }
}

fn load_reference(path: &Path, arch: RefArch) -> RefModel {
    let mut file = std::fs::File::open(path).expect("open model");
    let content = gguf_file::Content::read(&mut file).expect("read gguf");
    let device = &Device::Cpu;
    match arch {
        RefArch::Llama => {
            RefModel::Llama(quantized_llama::ModelWeights::from_gguf(content, &mut file, device).expect("load"))
        }
        RefArch::Qwen2 => {
            RefModel::Qwen2(quantized_qwen2::ModelWeights::from_gguf(content, &mut file, device).expect("load"))
        }
        RefArch::Qwen3 => {
            RefModel::Qwen3(quantized_qwen3::ModelWeights::from_gguf(content, &mut file, device).expect("load"))
        }
        RefArch::Phi3 => {
            RefModel::Phi3(quantized_phi3::ModelWeights::from_gguf(false, content, &mut file, device).expect("load"))
        }
        RefArch::Gemma3 => RefModel::Gemma3(gemma3_from_gguf(content, &mut file)),
    }
}

/// candle's dense Gemma 3 with the GGUF's weights under Hugging Face names. llama.cpp's
/// conversion stores every RMSNorm weight as `1 + w` (Gemma normalizes by `1 + w`), so 1 is
/// taken off again.
fn gemma3_from_gguf(content: gguf_file::Content, file: &mut std::fs::File) -> gemma3::Model {
    let md = |k: &str| content.metadata.get(&format!("gemma3.{k}")).unwrap_or_else(|| panic!("gemma3.{k}"));
    let u = |k: &str| md(k).to_u32().expect("integer") as usize;
    let f = |k: &str| md(k).to_f32().expect("float") as f64;
    let vocab_size = content.tensor_infos["token_embd.weight"].shape.dims()[0];
    let config = gemma3::Config {
        attention_bias: false,
        head_dim: u("attention.key_length"),
        hidden_activation: candle_nn::Activation::GeluPytorchTanh,
        hidden_size: u("embedding_length"),
        intermediate_size: u("feed_forward_length"),
        num_attention_heads: u("attention.head_count"),
        num_hidden_layers: u("block_count"),
        num_key_value_heads: u("attention.head_count_kv"),
        rms_norm_eps: f("attention.layer_norm_rms_epsilon"),
        rope_theta: f("rope.freq_base"),
        rope_local_base_freq: f("rope.freq_base_swa"),
        vocab_size,
        final_logit_softcapping: None,
        attn_logit_softcapping: None,
        query_pre_attn_scalar: u("attention.key_length"),
        sliding_window: u("attention.sliding_window"),
        sliding_window_pattern: u("attention.sliding_window_pattern"),
        max_position_embeddings: u("context_length"),
    };
    let names: Vec<String> = content.tensor_infos.keys().cloned().collect();
    let mut tensors = std::collections::HashMap::new();
    for name in names {
        let t =
            content.tensor(file, &name, &Device::Cpu).expect("tensor").dequantize(&Device::Cpu).expect("dequantize");
        let (hf, is_norm) = match name.split('.').collect::<Vec<_>>().as_slice() {
            ["token_embd", "weight"] => ("model.embed_tokens.weight".to_string(), false),
            ["output_norm", "weight"] => ("model.norm.weight".to_string(), true),
            ["blk", l, part, "weight"] => {
                let hf_part = match *part {
                    "attn_norm" => "input_layernorm",
                    "post_attention_norm" => "post_attention_layernorm",
                    "ffn_norm" => "pre_feedforward_layernorm",
                    "post_ffw_norm" => "post_feedforward_layernorm",
                    "attn_q_norm" => "self_attn.q_norm",
                    "attn_k_norm" => "self_attn.k_norm",
                    "attn_q" => "self_attn.q_proj",
                    "attn_k" => "self_attn.k_proj",
                    "attn_v" => "self_attn.v_proj",
                    "attn_output" => "self_attn.o_proj",
                    "ffn_gate" => "mlp.gate_proj",
                    "ffn_up" => "mlp.up_proj",
                    "ffn_down" => "mlp.down_proj",
                    other => panic!("unexpected gemma3 tensor {other}"),
                };
                (format!("model.layers.{l}.{hf_part}.weight"), part.contains("norm"))
            }
            _ => panic!("unexpected gemma3 tensor {name}"),
        };
        let t = if is_norm { (t - 1.0).expect("norm") } else { t };
        tensors.insert(hf, t);
    }
    let vb = candle_nn::VarBuilder::from_tensors(tensors, candle_core::DType::F32, &Device::Cpu);
    gemma3::Model::new(false, &config, vb).expect("candle gemma3")
}

/// Greedy tokens from candle-transformers' own model, one prompt at a time, no EOS stop.
pub fn reference_greedy(path: &Path, arch: RefArch, prompts: &[Vec<u32>], n: usize) -> Vec<Vec<u32>> {
    reference_greedy_with_top(path, arch, prompts, n, 0)
        .into_iter()
        .map(|steps| steps.into_iter().map(|s| s.0).collect())
        .collect()
}

/// One greedy step: the chosen token and the top (token, logprob) pairs of its distribution.
pub type GreedyStep = (u32, Vec<(u32, f32)>);

/// Greedy tokens plus, per step, the top `k` (token, logprob) of the reference distribution.
pub fn reference_greedy_with_top(
    path: &Path,
    arch: RefArch,
    prompts: &[Vec<u32>],
    n: usize,
    k: usize,
) -> Vec<Vec<GreedyStep>> {
    prompts
        .iter()
        .map(|prompt| {
            // A fresh model per prompt: its KV cache lives inside the model.
            let mut model = load_reference(path, arch);
            let mut out = Vec::with_capacity(n);
            let input = Tensor::new(prompt.as_slice(), &Device::Cpu).unwrap().unsqueeze(0).unwrap();
            let mut logits = model.forward(&input, 0);
            for i in 0..n {
                let next = argmax(&logits);
                out.push((next, top_logprobs(&logits, k)));
                if i + 1 == n {
                    break;
                }
                let input = Tensor::new(&[next], &Device::Cpu).unwrap().unsqueeze(0).unwrap();
                logits = model.forward(&input, prompt.len() + i);
            }
            out
        })
        .collect()
}

/// Last-position logits of candle-transformers' model over `tokens` (a fresh model each call).
pub fn reference_logits(path: &Path, arch: RefArch, tokens: &[u32]) -> Vec<f32> {
    let mut model = load_reference(path, arch);
    let input = Tensor::new(tokens, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    model.forward(&input, 0).flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

/// candle-transformers' logits at every position of `tokens`, fed one token at a time through
/// its own KV cache: row `i` predicts token `i + 1`.
pub fn reference_logits_per_position(path: &Path, arch: RefArch, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut model = load_reference(path, arch);
    (0..tokens.len())
        .map(|i| {
            let input = Tensor::new(&tokens[i..=i], &Device::Cpu).unwrap().unsqueeze(0).unwrap();
            model.forward(&input, i).flatten_all().unwrap().to_vec1::<f32>().unwrap()
        })
        .collect()
}

fn argmax(logits: &Tensor) -> u32 {
    let v = logits.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Prompts of clearly different lengths (a few tokens to a few hundred).
pub fn varied_prompts() -> Vec<String> {
    let long = "The history of computing is a story of ideas building on ideas. ".repeat(12);
    vec![
        "Hi".to_string(),
        "The capital of France is".to_string(),
        "Write a haiku about the sea.".to_string(),
        "List three prime numbers: 2, 3,".to_string(),
        format!("Summarize this text: {long}"),
        "def fibonacci(n):\n    ".to_string(),
        "Once upon a time, in a small village near the mountains, there lived an old clockmaker who".to_string(),
        format!("{} And so", "One two three four five six seven eight nine ten. ".repeat(6)),
    ]
}

fn top_logprobs(logits: &Tensor, k: usize) -> Vec<(u32, f32)> {
    if k == 0 {
        return Vec::new();
    }
    let v = logits.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let lp = entrobatch::sampler::log_softmax(&v);
    let mut idx: Vec<usize> = (0..lp.len()).collect();
    idx.sort_by(|&a, &b| lp[b].total_cmp(&lp[a]));
    idx.into_iter().take(k).map(|i| (i as u32, lp[i])).collect()
}

/// vLLM's `check_logprobs_close` rule for paths whose arithmetic differs from the reference:
/// sequences must agree until they diverge, and where they first diverge each side's token
/// must be among the other's top candidates (a near-tie), after which the contexts differ
/// and comparison stops. Returns the index of the first divergence, if any.
pub fn assert_close_greedy(
    label: &str,
    got: &[(u32, Vec<(u32, f32)>)],
    expected: &[(u32, Vec<(u32, f32)>)],
) -> Option<usize> {
    for (i, ((g, g_top), (e, e_top))) in got.iter().zip(expected).enumerate() {
        if g == e {
            continue;
        }
        assert!(
            e_top.iter().any(|(t, _)| t == g) && g_top.iter().any(|(t, _)| t == e),
            "{label}: step {i} chose {g} where the reference chose {e}, and they are not near-ties \
             (reference top {e_top:?}, ours top {g_top:?})"
        );
        return Some(i);
    }
    None
}

/// A small token budget and KV pool of 16-token blocks: prompts above ~120 tokens arrive in
/// chunks next to other sequences' decodes, and sequences preempt each other.
pub fn pressured_config(path: &Path, matmul_mode: MatmulMode, num_blocks: usize, max_num_seqs: usize) -> EngineConfig {
    let mut config = EngineConfig::new(path);
    config.block_size = 16;
    config.num_blocks = Some(num_blocks);
    config.max_num_batched_tokens = 128;
    config.max_num_seqs = max_num_seqs;
    config.matmul_mode = matmul_mode;
    config
}

/// Greedy, ignoring EOS, with the top `top` log-probabilities of every step.
pub fn greedy_with_logprobs(max_tokens: usize, top: usize) -> GenerationParams {
    GenerationParams {
        sampling: SamplingParams { logprobs: Some(top), ..SamplingParams::greedy() },
        max_tokens,
        ignore_eos: true,
        ..GenerationParams::default()
    }
}

/// `varied_prompts()` tokenized by `engine`, each cut to 200 tokens: byte-level tiny
/// vocabularies make long prompts, and every request must stay well inside a small pool.
pub fn varied_prompt_ids(engine: &Engine) -> Vec<Vec<u32>> {
    varied_prompts()
        .iter()
        .map(|p| {
            let mut ids =
                engine.tokenize_prompt(&Prompt::Text(p.clone()), &GenerationParams::default()).expect("tokenize");
            ids.truncate(200);
            ids
        })
        .collect()
}
