pub mod bench;
pub mod entropix;
pub mod eval;
pub mod loadtest;
pub mod perplexity;
pub mod plot_metrics;
pub mod plot_sweep;
pub mod prompts;
pub mod run;
pub mod serve;

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

/// Writes report text to stdout. A reader that has gone away (`| head`) ends the printing,
/// not the command: the files asked for with `--json` or `--plot` are still written, and the
/// run is not thrown away by a panic on the next `println!`.
pub fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            tracing::warn!("cannot write to stdout: {e}");
        }
    }
}

/// `emit` with a line ending, formatted like `println!`.
macro_rules! emitln {
    ($($arg:tt)*) => { $crate::commands::emit(&format!("{}\n", format_args!($($arg)*))) };
}
pub(crate) use emitln;

/// The model path a command uses: the flag, else `$ENTROBATCH_MODEL`, else the default.
pub fn resolve_model(flag: Option<PathBuf>) -> Result<PathBuf> {
    let path = flag
        .or_else(|| std::env::var_os("ENTROBATCH_MODEL").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(entrobatch::DEFAULT_MODEL_PATH));
    // A GGUF file, or a Hugging Face checkpoint directory.
    if !Path::new(&path).exists() {
        bail!("model {} not found; run `scripts/fetch-model smollm2` (or pass --model PATH)", path.display());
    }
    Ok(path)
}

/// `--speculative-config`'s JSON, checked; `None` without the flag.
pub fn speculative_config(json: Option<&str>) -> Result<Option<entrobatch::SpeculativeConfig>> {
    json.map(|text| entrobatch::SpeculativeConfig::from_json(text).map_err(anyhow::Error::from)).transpose()
}

/// The KV cache's value type, one flag for every command that starts an engine.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct KvCacheArgs {
    /// KV cache values: f16 (the default for GGUF models with the int8 kernels), q8 (int8 with
    /// a scale per 32 values: about 1.9x the tokens of f16 in the same memory, read by integer
    /// attention kernels; llama.cpp's `q8_0` layout) or f32 (exact; the default with --matmul
    /// quantized and for safetensors checkpoints).
    #[arg(long, value_name = "f16|q8|f32")]
    pub kv_cache_dtype: Option<entrobatch::KvDtype>,
    /// KV cache size in MiB [default: 1024].
    #[arg(long)]
    pub kv_cache_mb: Option<usize>,
}

impl KvCacheArgs {
    /// Sets the engine's cache from the flags; absent flags keep the engine's defaults.
    pub fn apply(&self, config: &mut entrobatch::EngineConfig) {
        config.kv_cache_dtype = self.kv_cache_dtype;
        if let Some(mb) = self.kv_cache_mb {
            config.kv_cache_bytes = mb << 20;
        }
    }
}
