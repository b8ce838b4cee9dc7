use std::path::PathBuf;

use entrobatch_model_runner::{AttentionKernel, KvDtype, MatmulMode};
use entrobatch_scheduler::{LatencyTargets, SchedulerConfig};

use crate::speculative::SpeculativeConfig;
use crate::structured::GrammarLimits;

/// Everything `Engine::start` needs; defaults suit a 2-core CPU and a sub-1B model.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub model_path: PathBuf,
    /// Tokens per KV block.
    pub block_size: usize,
    /// Memory for the paged KV cache; the block count follows from it and the model shape.
    pub kv_cache_bytes: usize,
    /// Overrides `kv_cache_bytes` with the memory of this many tokens' K/V at every layer
    /// (rounded up to whole blocks), e.g. to match another server's context size. A model with
    /// windowed layers holds more tokens in it, since those layers give back what left the window.
    pub kv_cache_tokens: Option<usize>,
    /// Overrides both with an exact count of pages (`KvGroups`; blocks, for a model without
    /// windows); tests force preemption with it.
    pub num_blocks: Option<usize>,
    /// The one token budget per step shared by prefill chunks and decodes.
    pub max_num_batched_tokens: usize,
    /// Prefill tokens a step may carry beside decodes (`SchedulerConfig` says why).
    pub max_prefill_tokens_with_decodes: usize,
    /// Branch continuations' rows beside other requests' (`SchedulerConfig::branch_row_share`).
    pub branch_row_share: f64,
    pub max_num_seqs: usize,
    /// Context limit; `None` takes the model's own.
    pub max_model_len: Option<usize>,
    pub enable_prefix_caching: bool,
    pub matmul_mode: MatmulMode,
    /// How the KV cache stores values; `None` picks by model and mode (`kv_cache_dtype()`).
    pub kv_cache_dtype: Option<KvDtype>,
    /// `CandleMirror` makes results bit-comparable with candle-transformers' models (tests).
    pub attention_kernel: AttentionKernel,
    /// Requests admitted but not yet finished beyond which `submit` answers `QueueFull`; `None`:
    /// no bound, since an embedder paces its own submissions (an offline batch of thousands is
    /// normal). `entrobatch serve` always sets one (`serving_max_queued_requests`).
    pub max_queued_requests: Option<usize>,
    /// Bounds on a structured output's grammar: its size and compile time.
    pub grammar_limits: GrammarLimits,
    /// TTFT and TPOT targets: admission refuses what would wait past the TTFT target, and a
    /// step beside decodes is sized to the TPOT target (`LatencyTargets`). Off by default.
    pub latency_targets: LatencyTargets,
    /// Drafts for speculative decoding (`--speculative-config`); `None`: no speculation.
    pub speculative: Option<SpeculativeConfig>,
    /// Test-only faults (tests/faults.rs; feature `faults`, never in a release build).
    #[cfg(feature = "faults")]
    #[doc(hidden)]
    pub faults: crate::faults::FaultInjection,
}

impl EngineConfig {
    pub const DEFAULT_KV_CACHE_BYTES: usize = 1 << 30;
    /// In-flight requests per running sequence that `serving_max_queued_requests` allows.
    pub const SERVING_QUEUED_PER_SEQ: usize = 2;

    /// The scheduler's limits default as `SchedulerConfig::default()` says; the KV pool's size
    /// and the context limit follow from memory and the model at start.
    pub fn new(model_path: impl Into<PathBuf>) -> Self {
        let limits = SchedulerConfig::default();
        Self {
            model_path: model_path.into(),
            block_size: limits.block_size,
            kv_cache_bytes: Self::DEFAULT_KV_CACHE_BYTES,
            kv_cache_tokens: None,
            num_blocks: None,
            max_num_batched_tokens: limits.max_num_batched_tokens,
            max_prefill_tokens_with_decodes: limits.max_prefill_tokens_with_decodes,
            branch_row_share: limits.branch_row_share,
            max_num_seqs: limits.max_num_seqs,
            max_model_len: None,
            enable_prefix_caching: limits.enable_prefix_caching,
            matmul_mode: MatmulMode::default(),
            kv_cache_dtype: None,
            attention_kernel: AttentionKernel::default(),
            max_queued_requests: None,
            grammar_limits: GrammarLimits::default(),
            latency_targets: LatencyTargets::default(),
            speculative: None,
            #[cfg(feature = "faults")]
            faults: Default::default(),
        }
    }

    /// The server's default bound: HTTP clients do not pace themselves, and past saturation a
    /// fast refusal (429 with `Retry-After`) serves them better than a wait that grows without
    /// end and ends in client timeouts. 2 x `max_num_seqs`: 128 with the default limits, TGI's
    /// default `max_concurrent_requests`.
    pub fn serving_max_queued_requests(&self) -> usize {
        self.max_num_seqs.saturating_mul(Self::SERVING_QUEUED_PER_SEQ)
    }

    /// The KV cache's value type: the configured one, else f16 for a GGUF model under the int8
    /// or dense kernels (as llama.cpp's and vLLM's default caches: half the memory, and a
    /// decode step streams every cached K/V, so a batch of decodes runs faster;
    /// docs/benchmarks/notebook.md, "2026-11-22 22:00 UTC"), and f32 where results are compared
    /// bit for bit with candle-transformers: the `Quantized` mode and Hugging Face checkpoints
    /// (a directory).
    pub fn kv_cache_dtype(&self) -> KvDtype {
        self.kv_cache_dtype.unwrap_or_else(|| {
            if self.matmul_mode == MatmulMode::Quantized || self.model_path.is_dir() {
                KvDtype::F32
            } else {
                KvDtype::F16
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_cache_dtype_defaults_to_f16_only_where_results_are_not_compared_with_candle() {
        let gguf = EngineConfig::new("model.gguf");
        assert_eq!(gguf.kv_cache_dtype(), KvDtype::F16);
        let quantized = EngineConfig { matmul_mode: MatmulMode::Quantized, ..EngineConfig::new("model.gguf") };
        assert_eq!(quantized.kv_cache_dtype(), KvDtype::F32);
        let checkpoint_dir = std::env::temp_dir();
        assert_eq!(EngineConfig::new(&checkpoint_dir).kv_cache_dtype(), KvDtype::F32);
        let chosen = EngineConfig { kv_cache_dtype: Some(KvDtype::F32), ..EngineConfig::new("model.gguf") };
        assert_eq!(chosen.kv_cache_dtype(), KvDtype::F32);
        let chosen = EngineConfig { kv_cache_dtype: Some(KvDtype::F16), ..quantized };
        assert_eq!(chosen.kv_cache_dtype(), KvDtype::F16);
    }
}
