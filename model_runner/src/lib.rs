//! Model execution for entrobatch: GGUF models (llama with Llama 3.x RoPE scaling, qwen2,
//! qwen3, gemma3, phi3) and Hugging Face checkpoint directories (llama, qwen2, qwen3, WeDLM;
//! `load_model` picks by path) run one packed varlen
//! batch per step over a paged KV cache, plus the tokenizer from the GGUF metadata or the
//! directory's tokenizer.json.

use std::path::Path;

pub mod attention;
pub mod attention_exact;
mod attention_f16;
mod attention_f16_simd;
pub mod attention_kernel;
pub mod attention_q8;
mod attention_q8_simd;
mod attention_q8_values;
mod attention_runs;
mod attention_simd;
pub mod batch;
pub mod config;
pub mod embedding;
pub mod error;
pub mod footprint;
mod gated_activation;
pub mod gguf_config;
pub mod gguf_loader;
pub mod hf_config;
pub mod hf_loader;
pub mod hot_workers;
pub mod int8_gemm;
pub mod kv_cache;
pub mod kv_f16;
pub mod kv_groups;
pub mod kv_layout;
pub mod kv_q8;
pub mod linear;
pub mod metrics;
pub mod model;
pub mod ops;
pub mod rope;
pub mod runner;
pub mod softmax;
mod softmax_simd;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
#[cfg(any(test, feature = "test-support"))]
pub mod testing_hf;
pub mod tokenizer;

// The chat template and the recommended sampling values are part of the tokenizer module; other
// crates name them from the crate root (`entrobatch_model_runner::chat_template::...`).
pub use tokenizer::{chat_template, recommended_sampling};

pub use batch::{ForwardBatch, SeqSpan};
pub use chat_template::{ChatMessage, ChatTemplate};
pub use config::{Activation, Architecture, LongContextRope, ModelConfig, RopeConfig, SlidingWindow};
pub use embedding::Embedding;
pub use error::{ModelError, Result};
pub use footprint::{ProjectionCost, WeightFootprint};
pub use gguf_loader::load_gguf;
pub use kv_cache::{KvCache, KvDtype};
pub use kv_groups::KvGroups;
pub use linear::{AttentionKernel, MatmulMode};
pub use metrics::AttnMetrics;
pub use model::{ForwardOutput, Model};
pub use recommended_sampling::RecommendedSampling;
pub use runner::ModelRunner;
pub use tokenizer::Tokenizer;

/// Loads a model by path: a directory is a Hugging Face checkpoint (`config.json`,
/// safetensors, `tokenizer.json`), anything else a GGUF file. `mode` applies to GGUF weights;
/// checkpoint weights are always dense f32.
pub fn load_model(path: &Path, mode: MatmulMode) -> Result<(Model, Tokenizer)> {
    if path.is_dir() {
        hf_loader::load_hf_dir(path)
    } else {
        load_gguf(path, mode)
    }
}
