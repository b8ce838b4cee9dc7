//! Perplexity of a text through the engine's prompt-logprob path, computed as llama.cpp's
//! `llama-perplexity` computes it, so the two compare number for number: the text tokenized
//! once (BOS first where the model adds one), cut into non-overlapping chunks of `ctx_size`
//! tokens (the remainder dropped), each chunk's first token replaced by BOS where the model
//! adds one, the first half of each chunk context only, and the tokens after it scored:
//! positions `ctx/2 + 1 .. ctx` of each chunk. PPL = exp(mean NLL); its standard error is
//! `PPL * sqrt(var(NLL) / (n - 1))`, llama.cpp's.

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use entrobatch::{Engine, EngineError, GenerationParams, Prompt, Request};

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PerplexityReport {
    pub ppl: f64,
    pub ppl_stderr: f64,
    pub tokens_scored: usize,
    pub chunks: usize,
    pub ctx_size: usize,
    /// Mean negative log-likelihood (nats per token).
    pub mean_nll: f64,
    /// The model's most likely token at each scored position, in order: compared with
    /// llama.cpp's (teacher-forced top-1 agreement).
    #[serde(skip)]
    pub argmax: Vec<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum PerplexityError {
    #[error(
        "the text has {tokens} tokens: at least 2 x --ctx-size ({ctx_size}) are needed, as llama-perplexity requires"
    )]
    TooShort { tokens: usize, ctx_size: usize },
    #[error("--ctx-size must be at least 4, got {0}")]
    BadContext(usize),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("chunk {chunk} failed: {message}")]
    Chunk { chunk: usize, message: String },
}

/// The chunks llama-perplexity scores: `tokens` cut into `ctx_size` pieces, the first token of
/// each replaced by `bos` when the model adds one.
pub fn chunks(tokens: &[u32], ctx_size: usize, bos: Option<u32>) -> Vec<Vec<u32>> {
    tokens
        .chunks_exact(ctx_size)
        .map(|chunk| {
            let mut chunk = chunk.to_vec();
            if let Some(bos) = bos {
                chunk[0] = bos;
            }
            chunk
        })
        .collect()
}

/// Accumulates NLLs the way llama-perplexity does.
#[derive(Default, Debug)]
pub struct NllSum {
    nll: f64,
    nll2: f64,
    count: usize,
}

impl NllSum {
    pub fn add(&mut self, logprob: f64) {
        self.nll -= logprob;
        self.nll2 += logprob * logprob;
        self.count += 1;
    }

    pub fn report(&self, chunks: usize, ctx_size: usize) -> PerplexityReport {
        let n = self.count.max(1) as f64;
        let mean = self.nll / n;
        let ppl = mean.exp();
        let var = self.nll2 / n - mean * mean;
        let ppl_stderr = if var > 0.0 && self.count > 1 { ppl * (var / (n - 1.0)).sqrt() } else { 0.0 };
        PerplexityReport {
            ppl,
            ppl_stderr,
            tokens_scored: self.count,
            chunks,
            ctx_size,
            mean_nll: mean,
            argmax: Vec::new(),
        }
    }
}

/// Scores `text` with `engine`: every chunk submitted at once (the engine batches them), at
/// most `max_chunks` of them (llama-perplexity's `--chunks`), `progress` shows chunks done.
pub fn perplexity(
    engine: &Engine,
    text: &str,
    ctx_size: usize,
    max_chunks: Option<usize>,
    progress: bool,
) -> Result<PerplexityReport, PerplexityError> {
    if ctx_size < 4 {
        return Err(PerplexityError::BadContext(ctx_size));
    }
    let tokenizer = engine.tokenizer();
    let tokens = tokenizer.encode(text, true).map_err(EngineError::from)?;
    if tokens.len() < 2 * ctx_size {
        return Err(PerplexityError::TooShort { tokens: tokens.len(), ctx_size });
    }
    let bos = tokenizer.bos_token_id.filter(|_| tokenizer.add_bos_token);
    let mut chunks = chunks(&tokens, ctx_size, bos);
    chunks.truncate(max_chunks.unwrap_or(usize::MAX));
    let params = GenerationParams { max_tokens: 0, prompt_logprobs: Some(1), ..GenerationParams::default() };
    let requests = chunks.iter().map(|c| Request::new(Prompt::TokenIds(c.clone()), params.clone())).collect();
    let handles = engine.submit_all(requests)?;
    let bar = if progress { ProgressBar::new(chunks.len() as u64) } else { ProgressBar::hidden() };
    if let Ok(style) = ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} chunks {eta}") {
        bar.set_style(style.progress_chars("=> "));
    }
    let first = ctx_size / 2;
    let mut sum = NllSum::default();
    let mut argmax = Vec::new();
    for (chunk, handle) in handles.into_iter().enumerate() {
        let out = handle.collect_blocking();
        if let Some(message) = out.error {
            return Err(PerplexityError::Chunk { chunk, message });
        }
        // Entry j scores position j + 1; llama.cpp scores positions first + 1 .. ctx.
        for scored in out.prompt_logprobs.iter().skip(first) {
            sum.add(f64::from(scored.logprob));
            argmax.push(scored.top_logprobs.first().map_or(scored.token_id, |&(id, _)| id));
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(PerplexityReport { argmax, ..sum.report(chunks.len(), ctx_size) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_drop_the_remainder_and_start_with_bos() {
        let tokens: Vec<u32> = (10..21).collect();
        assert_eq!(chunks(&tokens, 4, Some(1)), vec![vec![1, 11, 12, 13], vec![1, 15, 16, 17]]);
        assert_eq!(chunks(&tokens, 5, None), vec![vec![10, 11, 12, 13, 14], vec![15, 16, 17, 18, 19]]);
    }

    #[test]
    fn perplexity_and_its_error_follow_llama_cpp() {
        // NLLs 1, 2, 3: mean 2, PPL e^2; var = (1+4+9)/3 - 4 = 2/3; stderr = e^2 sqrt(2/3 / 2).
        let mut sum = NllSum::default();
        for lp in [-1.0, -2.0, -3.0] {
            sum.add(lp);
        }
        let r = sum.report(1, 8);
        assert!((r.ppl - 2f64.exp()).abs() < 1e-12);
        assert!((r.ppl_stderr - 2f64.exp() * (1.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!((r.tokens_scored, r.chunks, r.mean_nll), (3, 1, 2.0));
    }
}
