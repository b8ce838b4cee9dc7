//! `entrobatch perplexity`: a text file's perplexity, number for number with llama-perplexity.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use entrobatch::Engine;
use entrobatch_eval::perplexity::perplexity;

#[derive(Args, Debug)]
pub struct PerplexityArgs {
    /// GGUF file or Hugging Face checkpoint; default: $ENTROBATCH_MODEL, else SmolLM2.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// The text to score (UTF-8).
    #[arg(long)]
    pub file: PathBuf,
    /// Tokens per chunk; the second half of each is scored (llama-perplexity's --ctx-size).
    #[arg(long, default_value_t = 512)]
    pub ctx_size: usize,
    /// Write the most likely token id at each scored position (a JSON array), to compare with
    /// another implementation's over the same contexts.
    #[arg(long)]
    pub top1: Option<PathBuf>,
    /// Score only the first N chunks (llama-perplexity's --chunks).
    #[arg(long)]
    pub chunks: Option<usize>,
    /// Write {"ppl", "ppl_stderr", "tokens_scored", "chunks", ...} here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Engine matmul mode: int8 (the default), dense (f32 GEMM) or quantized (candle's kernels).
    #[arg(long, default_value = "int8", value_parser = entrobatch_bench::throughput::parse_matmul_mode)]
    pub matmul: entrobatch::MatmulMode,
    #[command(flatten)]
    pub kv_cache: super::KvCacheArgs,
    #[arg(long)]
    pub no_progress: bool,
}

pub fn run(args: PerplexityArgs) -> Result<()> {
    let model = super::resolve_model(args.model)?;
    let text = std::fs::read_to_string(&args.file).with_context(|| format!("cannot read {}", args.file.display()))?;
    let mut config = entrobatch_bench::throughput::engine_config_with(&model, args.matmul);
    args.kv_cache.apply(&mut config);
    // Sequences are one chunk long (the context llama-perplexity's -c sets, by which it also
    // picks Phi-3's RoPE factors), plus the one position every request reserves to generate.
    config.max_model_len = Some(args.ctx_size + 1);
    let engine = Engine::start(config)?;
    let report = perplexity(&engine, &text, args.ctx_size, args.chunks, !args.no_progress)?;
    super::emitln!(
        "{}: PPL = {:.4} +/- {:.5} over {} tokens in {} chunks of {}",
        args.file.display(),
        report.ppl,
        report.ppl_stderr,
        report.tokens_scored,
        report.chunks,
        report.ctx_size
    );
    if let Some(path) = &args.top1 {
        std::fs::write(path, serde_json::to_string(&report.argmax)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
