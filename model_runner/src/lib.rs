//! Model execution for entrobatch: GGUF llama/qwen2 models and Hugging Face checkpoint
//! directories (llama, qwen2, qwen3, WeDLM; `load_model` picks by path) run one packed varlen
//! batch per step over a paged KV cache, plus the tokenizer from the GGUF metadata or the
//! directory's tokenizer.json.

pub mod attention;
pub mod attention_exact;
mod attention_simd;
pub mod batch;
pub mod config;
pub mod embedding;
pub mod error;
pub mod hf_config;
pub mod hf_loader;
pub mod hot_workers;
pub mod int8_gemm;
pub mod kv_cache;
pub mod linear;
pub mod metrics;
pub mod model;
pub mod ops;
pub mod recommended_sampling;
pub mod rope;
pub mod runner;
mod silu;
pub mod softmax;

pub use batch::{ForwardBatch, SeqSpan};
pub use chat_template::{ChatMessage, ChatTemplate};
pub use config::{Architecture, ModelConfig};
pub use embedding::Embedding;
pub use error::{ModelError, Result};
pub use kv_cache::{KvCache, KvDtype};
pub use linear::{AttentionKernel, MatmulMode};
pub use metrics::AttnMetrics;
pub use model::{ForwardOutput, Model};
pub use recommended_sampling::RecommendedSampling;
pub use runner::{load_gguf, load_model, ModelRunner};
pub use tokenizer::GgufTokenizer;
pub mod chat_template;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
#[cfg(any(test, feature = "test-support"))]
pub mod testing_hf;
pub mod tokenizer;
