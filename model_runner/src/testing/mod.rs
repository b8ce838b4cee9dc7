//! Tiny random-weight GGUF models for tests: a few hundred KB, written in milliseconds, laid
//! out exactly like llama.cpp's llama/qwen2/qwen3/gemma3/phi3 conversions (metadata keys, tensor names, F32
//! norms, quantized projections, full tokenizer metadata), so loaders, tokenizer and runner can
//! be tested without a real model file.

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::batch::{ForwardBatch, SeqSpan};
use crate::config::LongContextRope;
use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

mod spm_vocab;
mod vocab;

pub use spm_vocab::{spm_tokenizer_metadata, SPM_CONTROL, SPM_FIRST_BYTE_ID, SPM_PIECES, SPM_USER_DEFINED};
pub use vocab::{gpt2_byte_to_unicode, TINY_VOCAB_SIZE};

/// A fresh path `<root>/entrobatch-<pid>-<n>-<name>` for one test's files (nothing is created).
/// Tests run in parallel and several ask for the same name: the per-call number keeps one test
/// from reading a file another is still writing, or has just removed. Pass the test crate's
/// `env!("CARGO_TARGET_TMPDIR")` as `root`, which keeps the files inside `target/`.
pub fn unique_test_path(root: &str, name: &str) -> PathBuf {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    Path::new(root).join(format!("entrobatch-{}-{call}-{name}", std::process::id()))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TinyArch {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
    Phi3,
}

impl TinyArch {
    /// The `general.architecture` value and metadata key prefix.
    pub fn gguf_name(self) -> &'static str {
        match self {
            TinyArch::Llama => "llama",
            TinyArch::Qwen2 => "qwen2",
            TinyArch::Qwen3 => "qwen3",
            TinyArch::Gemma3 => "gemma3",
            TinyArch::Phi3 => "phi3",
        }
    }

    /// Qwen's vocabulary layout (control tokens after the merges) rather than SmolLM2's.
    pub(crate) fn qwen_vocab(self) -> bool {
        matches!(self, TinyArch::Qwen2 | TinyArch::Qwen3)
    }
}

#[derive(Clone, Debug)]
pub struct TinyModelSpec {
    pub arch: TinyArch,
    pub hidden: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub intermediate: usize,
    pub context_length: usize,
    pub seed: u64,
    /// Dtype of the embedding and projection matrices. Their row length (`hidden` or
    /// `intermediate`) must be a multiple of its block size: 32 for Q8_0/Q4_0/Q4_1, which is
    /// why k-quants (256) don't fit the default 64-wide model.
    pub dtype: GgmlDType,
    /// Per-head width when it is not `hidden / n_heads` (`attention.key_length`).
    pub key_length: Option<usize>,
    /// Gemma 3's sliding window: (window, pattern), the last layer of every `pattern` global.
    pub sliding_window: Option<(usize, usize)>,
    /// Llama 3.x RoPE frequency factors (`rope_freqs.weight`), `head_dim / 2` of them.
    pub rope_freq_factors: Option<Vec<f32>>,
    /// Phi-3's LongRoPE pair (`rope_factors_short/long.weight`) and the original context it
    /// switches at (`rope.scaling.original_context_length`).
    pub long_context_rope: Option<LongContextRope>,
    /// Metadata written after the generated keys, replacing any of the same name: a chat
    /// template of the test's own, `general.sampling.*` recommendations.
    pub extra_metadata: Vec<(String, Value)>,
    /// Qwen2 only: this value in the key bias of each KV head's slowest-turning RoPE pair, as
    /// Qwen2.5's first layers have (145-158 beside values of a few units).
    pub key_bias_outlier: Option<f32>,
}

impl TinyModelSpec {
    pub fn llama() -> Self {
        Self {
            arch: TinyArch::Llama,
            hidden: 64,
            n_layers: 2,
            n_heads: 4,
            n_kv_heads: 2,
            intermediate: 128,
            context_length: 512,
            seed: 0,
            dtype: GgmlDType::Q8_0,
            key_length: None,
            sliding_window: None,
            rope_freq_factors: None,
            long_context_rope: None,
            extra_metadata: Vec::new(),
            key_bias_outlier: None,
        }
    }

    pub fn qwen2() -> Self {
        Self { arch: TinyArch::Qwen2, ..Self::llama() }
    }

    /// Heads wider than `hidden / n_heads`, as Qwen3's are.
    pub fn qwen3() -> Self {
        Self { arch: TinyArch::Qwen3, key_length: Some(32), ..Self::llama() }
    }

    /// Four layers, the first three windowed to 8 keys and the last global.
    pub fn gemma3() -> Self {
        Self {
            arch: TinyArch::Gemma3,
            n_layers: 4,
            key_length: Some(32),
            sliding_window: Some((8, 4)),
            ..Self::llama()
        }
    }

    pub fn phi3() -> Self {
        Self { arch: TinyArch::Phi3, ..Self::llama() }
    }

    /// Llama with Llama 3.x RoPE frequency factors, computed by Meta's formula (factor 8,
    /// low/high frequency factors 1 and 4, original context 64: small enough that the
    /// tiny model's frequencies fall in all three bands).
    pub fn llama3() -> Self {
        let spec = Self::llama();
        let (factor, low, high, original) = (8.0f64, 1.0f64, 4.0f64, 64.0f64);
        let hd = spec.head_dim();
        let factors = (0..hd / 2)
            .map(|i| {
                let freq = 10_000f64.powf(-((2 * i) as f64) / hd as f64);
                let wavelen = std::f64::consts::TAU / freq;
                let (low_wavelen, high_wavelen) = (original / low, original / high);
                if wavelen < high_wavelen {
                    1.0
                } else if wavelen > low_wavelen {
                    factor as f32
                } else {
                    let smooth = (original / wavelen - low) / (high - low);
                    (1.0 / ((1.0 - smooth) / factor + smooth)) as f32
                }
            })
            .collect();
        Self { rope_freq_factors: Some(factors), ..spec }
    }

    /// Phi-3 with long-context RoPE as its 128k conversions are written: a context 4 times
    /// the original 256 (llama.cpp's smallest context, so that it can run either set), short
    /// factors near 1 and long ones growing towards the low frequencies, and
    /// `rope.scaling.attn_factor` = sqrt(1 + ln(4) / ln(256)).
    pub fn phi3_long_context() -> Self {
        let spec = Self { context_length: 1024, ..Self::phi3() };
        let half = spec.head_dim() / 2;
        let short_factors = (0..half).map(|i| 1.0 + 0.05 * i as f32).collect();
        let long_factors = (0..half).map(|i| 1.0 + 31.0 * (i as f32 / (half - 1) as f32).powi(2)).collect();
        let attn_factor = (1.0 + 4f64.ln() / 256f64.ln()).sqrt() as f32;
        Self {
            long_context_rope: Some(LongContextRope {
                original_context: 256,
                short_factors: Some(short_factors),
                long_factors,
            }),
            extra_metadata: vec![("phi3.rope.scaling.attn_factor".into(), Value::F32(attn_factor))],
            ..spec
        }
    }

    pub fn head_dim(&self) -> usize {
        self.key_length.unwrap_or(self.hidden / self.n_heads)
    }

    fn validate(&self) -> candle_core::Result<()> {
        let block = self.dtype.block_size();
        if self.n_heads == 0 || self.n_kv_heads == 0 || !self.hidden.is_multiple_of(self.n_heads) {
            candle_core::bail!("hidden {} not divisible by n_heads {}", self.hidden, self.n_heads);
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            candle_core::bail!("n_heads {} not divisible by n_kv_heads {}", self.n_heads, self.n_kv_heads);
        }
        if !self.hidden.is_multiple_of(block) || !self.intermediate.is_multiple_of(block) {
            candle_core::bail!("hidden/intermediate must be multiples of the {:?} block size {block}", self.dtype);
        }
        Ok(())
    }
}

/// Seeded normal weights for generated models (GGUF here, safetensors in `testing_hf`), so a
/// seed names one model.
pub(crate) struct WeightRng(SplitMix64);

impl WeightRng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(SplitMix64::seed_from_u64(seed))
    }

    /// Uniform in (0, 1]: never 0, so the Box-Muller log is finite.
    fn unit(&mut self) -> f64 {
        ((self.0.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    fn normal(&mut self, std: f32) -> f32 {
        let (u1, u2) = (self.unit(), self.unit());
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32 * std
    }

    pub(crate) fn tensor(&mut self, dims: &[usize], mean: f32, std: f32) -> candle_core::Result<Tensor> {
        let n = dims.iter().product();
        let data: Vec<f32> = (0..n).map(|_| mean + self.normal(std)).collect();
        Tensor::from_vec(data, dims, &Device::Cpu)
    }
}

// Scales chosen so a random model is neither flat nor saturated: embedding rows ~N(0, 1) feed
// the first RMSNorm, projections ~N(0, 0.08) keep each residual update O(1), and the output
// head at 0.25 gives logits with a std of ~2, so greedy decoding visits several tokens.
const EMBED_STD: f32 = 1.0;
const PROJ_STD: f32 = 0.08;
const OUTPUT_STD: f32 = 0.25;
const NORM_STD: f32 = 0.05;
const BIAS_STD: f32 = 0.05;

/// One sequence's prompt positions `range` as one step: a sequence alone in the step, its
/// positions in slots of the same number (pages `0..` of `block_table` in order), the logits of
/// the chunk's rows `logits_rows`.
pub fn prompt_chunk(
    tokens: &[u32],
    range: std::ops::Range<usize>,
    block_table: Vec<u32>,
    logits_rows: Vec<usize>,
) -> ForwardBatch {
    ForwardBatch {
        input_ids: tokens[range.clone()].to_vec(),
        positions: range.clone().map(|p| p as u32).collect(),
        slot_mappings: vec![range.clone().map(|p| p as i64).collect()],
        seqs: vec![SeqSpan {
            query_start: 0,
            query_len: range.len(),
            context_len: range.start,
            block_tables: vec![block_table],
            want_attn_metrics: false,
            attn_pad_to: None,
        }],
        logits_rows,
    }
}

/// Writes a complete tiny GGUF model to `path` (see the module docs).
pub fn write_tiny_gguf(path: &Path, spec: &TinyModelSpec) -> candle_core::Result<()> {
    spec.validate()?;
    let arch = spec.arch.gguf_name();
    let mut metadata: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        ("general.name".into(), Value::String(format!("tiny-random-{arch}"))),
        ("general.quantization_version".into(), Value::U32(2)),
    ];
    let (rope_base, eps) = match spec.arch {
        TinyArch::Llama | TinyArch::Phi3 => (10_000.0, 1e-5),
        TinyArch::Qwen2 | TinyArch::Qwen3 | TinyArch::Gemma3 => (1_000_000.0, 1e-6),
    };
    let u32_of = |x: usize| Value::U32(x as u32);
    let mut arch_kv = vec![
        ("context_length", u32_of(spec.context_length)),
        ("embedding_length", u32_of(spec.hidden)),
        ("block_count", u32_of(spec.n_layers)),
        ("feed_forward_length", u32_of(spec.intermediate)),
        ("attention.head_count", u32_of(spec.n_heads)),
        ("attention.head_count_kv", u32_of(spec.n_kv_heads)),
        ("rope.freq_base", Value::F32(rope_base)),
        ("attention.layer_norm_rms_epsilon", Value::F32(eps)),
    ];
    if matches!(spec.arch, TinyArch::Llama | TinyArch::Phi3) {
        // Real llama and phi3 GGUFs carry these; llama.cpp's qwen conversions do not.
        arch_kv.push(("rope.dimension_count", u32_of(spec.head_dim())));
        arch_kv.push(("vocab_size", u32_of(TINY_VOCAB_SIZE)));
    }
    if let Some(d) = spec.key_length {
        arch_kv.push(("attention.key_length", u32_of(d)));
        arch_kv.push(("attention.value_length", u32_of(d)));
    }
    if let Some((window, pattern)) = spec.sliding_window {
        arch_kv.push(("attention.sliding_window", u32_of(window)));
        arch_kv.push(("attention.sliding_window_pattern", u32_of(pattern)));
        arch_kv.push(("rope.freq_base_swa", Value::F32(10_000.0)));
    }
    if let Some(long) = &spec.long_context_rope {
        arch_kv.push(("rope.scaling.original_context_length", u32_of(long.original_context)));
    }
    metadata.extend(arch_kv.into_iter().map(|(k, v)| (format!("{arch}.{k}"), v)));
    metadata.extend(vocab::tokenizer_metadata(spec.arch)?);
    for (key, value) in &spec.extra_metadata {
        metadata.retain(|(k, _)| k != key);
        metadata.push((key.clone(), value.clone()));
    }

    let tensors = build_tensors(spec)?;
    let file = std::fs::File::create(path)?;
    let mut w = BufWriter::new(file);
    let md_refs: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    gguf_file::write(&mut w, &md_refs, &t_refs)?;
    std::io::Write::flush(&mut w)?;
    Ok(())
}

/// All tensors in llama.cpp naming, with candle shapes `(out, in)` (GGUF stores them reversed).
fn build_tensors(spec: &TinyModelSpec) -> candle_core::Result<Vec<(String, QTensor)>> {
    let mut rng = WeightRng::new(spec.seed ^ 0x5EED_0F7E_5700);
    let (h, hd, ff) = (spec.hidden, spec.head_dim(), spec.intermediate);
    let kv = spec.n_kv_heads * hd;
    let mut out = Vec::new();
    let quant = |t: Tensor| QTensor::quantize(&t, spec.dtype);
    let f32q = |t: Tensor| QTensor::quantize(&t, GgmlDType::F32);

    out.push(("token_embd.weight".to_string(), quant(rng.tensor(&[TINY_VOCAB_SIZE, h], 0.0, EMBED_STD)?)?));
    let q = spec.n_heads * hd;
    let (qk_norms, sandwich) = (matches!(spec.arch, TinyArch::Qwen3 | TinyArch::Gemma3), spec.arch == TinyArch::Gemma3);
    for l in 0..spec.n_layers {
        let p = |name: &str| format!("blk.{l}.{name}");
        out.push((p("attn_norm.weight"), f32q(rng.tensor(&[h], 1.0, NORM_STD)?)?));
        if spec.arch == TinyArch::Phi3 {
            out.push((p("attn_qkv.weight"), quant(rng.tensor(&[q + 2 * kv, h], 0.0, PROJ_STD)?)?));
        } else {
            out.push((p("attn_q.weight"), quant(rng.tensor(&[q, h], 0.0, PROJ_STD)?)?));
            out.push((p("attn_k.weight"), quant(rng.tensor(&[kv, h], 0.0, PROJ_STD)?)?));
            out.push((p("attn_v.weight"), quant(rng.tensor(&[kv, h], 0.0, PROJ_STD)?)?));
        }
        if spec.arch == TinyArch::Qwen2 {
            out.push((p("attn_q.bias"), f32q(rng.tensor(&[h], 0.0, BIAS_STD)?)?));
            let mut k_bias = rng.tensor(&[kv], 0.0, BIAS_STD)?;
            if let Some(outlier) = spec.key_bias_outlier {
                // NEOX pairs (i, i + hd / 2): the last of each half turns slowest.
                let mut values = k_bias.to_vec1::<f32>()?;
                for head in values.chunks_exact_mut(hd) {
                    head[hd / 2 - 1] = outlier;
                    head[hd - 1] = -outlier;
                }
                k_bias = Tensor::from_vec(values, &[kv], &Device::Cpu)?;
            }
            out.push((p("attn_k.bias"), f32q(k_bias)?));
            out.push((p("attn_v.bias"), f32q(rng.tensor(&[kv], 0.0, BIAS_STD)?)?));
        }
        if qk_norms {
            out.push((p("attn_q_norm.weight"), f32q(rng.tensor(&[hd], 1.0, NORM_STD)?)?));
            out.push((p("attn_k_norm.weight"), f32q(rng.tensor(&[hd], 1.0, NORM_STD)?)?));
        }
        out.push((p("attn_output.weight"), quant(rng.tensor(&[h, q], 0.0, PROJ_STD)?)?));
        out.push((p("ffn_norm.weight"), f32q(rng.tensor(&[h], 1.0, NORM_STD)?)?));
        if spec.arch == TinyArch::Phi3 {
            out.push((p("ffn_up.weight"), quant(rng.tensor(&[2 * ff, h], 0.0, PROJ_STD)?)?));
        } else {
            out.push((p("ffn_gate.weight"), quant(rng.tensor(&[ff, h], 0.0, PROJ_STD)?)?));
            out.push((p("ffn_up.weight"), quant(rng.tensor(&[ff, h], 0.0, PROJ_STD)?)?));
        }
        out.push((p("ffn_down.weight"), quant(rng.tensor(&[h, ff], 0.0, PROJ_STD)?)?));
        if sandwich {
            // llama.cpp's Gemma conversion stores these norms with the +1 already added.
            out.push((p("post_attention_norm.weight"), f32q(rng.tensor(&[h], 1.0, NORM_STD)?)?));
            out.push((p("post_ffw_norm.weight"), f32q(rng.tensor(&[h], 1.0, NORM_STD)?)?));
        }
    }
    out.push(("output_norm.weight".to_string(), f32q(rng.tensor(&[h], 1.0, NORM_STD)?)?));
    // Gemma ties its output head to the embedding, as its conversions do.
    if spec.arch != TinyArch::Gemma3 {
        out.push(("output.weight".to_string(), quant(rng.tensor(&[TINY_VOCAB_SIZE, h], 0.0, OUTPUT_STD)?)?));
    }
    if let Some(factors) = &spec.rope_freq_factors {
        let t = Tensor::from_vec(factors.clone(), factors.len(), &Device::Cpu)?;
        out.push(("rope_freqs.weight".to_string(), f32q(t)?));
    }
    if let Some(long) = &spec.long_context_rope {
        let named = [
            ("rope_factors_long.weight", Some(&long.long_factors)),
            ("rope_factors_short.weight", long.short_factors.as_ref()),
        ];
        for (name, factors) in named {
            if let Some(factors) = factors {
                let t = Tensor::from_vec(factors.clone(), factors.len(), &Device::Cpu)?;
                out.push((name.to_string(), f32q(t)?));
            }
        }
    }
    Ok(out)
}
