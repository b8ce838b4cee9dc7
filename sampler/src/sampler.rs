//! One engine step: turn each row of logits into a token and its logprobs.

use crate::error::SamplerError;
use crate::filter::{sample_filtered, sample_with_max, FilterConfig};
use crate::lanes::max_of;
use crate::logprobs::Normalizer;
use crate::params::SamplingParams;
use crate::penalties::{apply_penalties, needs_penalties};
use crate::rng::uniform;
use crate::token_mask::TokenMask;

/// Everything needed to draw one request's next token.
#[derive(Clone, Copy, Debug)]
pub struct SampleInput<'a> {
    /// Raw logits of one row (length = vocab).
    pub logits: &'a [f32],
    pub params: &'a SamplingParams,
    pub prompt_token_ids: &'a [u32],
    /// Tokens generated so far (penalties, n-gram ban).
    pub output_token_ids: &'a [u32],
    /// Effective seed (the engine resolves `params.seed == None` to a random one).
    pub seed: u64,
    /// Index of the output token being drawn; the draw is `uniform(seed, step, 0)`.
    pub step: u64,
    /// The tokens a structured-output grammar allows; `None` allows all. Rows without one
    /// pay nothing for it.
    pub mask: Option<&'a TokenMask>,
}

/// The chosen token and its log-probability under the raw model distribution.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleOutput {
    pub token_id: u32,
    /// log-softmax of the raw logits at `token_id` (before bias, penalties and
    /// temperature), like vLLM's default logprobs mode; `None` unless `params.logprobs` is set
    /// (the normalizer is a pass over the whole vocabulary; docs/benchmarks/notebook.md, "Issue 7
    /// targets: where this stands").
    pub logprob: Option<f32>,
    /// Top-n of the same raw log-softmax, descending; empty unless `params.logprobs` is set.
    pub top_logprobs: Vec<(u32, f32)>,
}

/// Samples one row of logits. Stateless: all randomness comes from `(seed, step)`, so rows
/// are independent (a bad row fails alone) and may run in any order or in parallel.
pub fn sample_row(row: &SampleInput<'_>) -> Result<SampleOutput, SamplerError> {
    let logits = row.logits;
    let scan = scan_logits(logits)?;
    row.params.validate(logits.len())?;

    let token_id = choose_token(row, &scan)?;
    let Some(n) = row.params.logprobs else {
        return Ok(SampleOutput { token_id, logprob: None, top_logprobs: Vec::new() });
    };
    // The maximum found while checking finiteness doubles as the softmax shift.
    let norm = Normalizer::with_max(logits, scan.max);
    let logprob = logits.get(token_id as usize).map_or(f32::NEG_INFINITY, |&l| norm.logprob(l));
    Ok(SampleOutput { token_id, logprob: Some(logprob), top_logprobs: norm.top(logits, n) })
}

/// What one pass over the raw row learns: it is usable, and where its peak is.
struct RowScan {
    max: f32,
    argmax: u32,
}

/// A row of logits a sampler may draw from: not empty, and no NaN or infinity.
pub(crate) fn check_row(logits: &[f32]) -> Result<(), SamplerError> {
    if logits.is_empty() {
        return Err(SamplerError::EmptyLogits);
    }
    match first_non_finite(logits) {
        Some(index) => Err(SamplerError::NonFiniteLogits { index }),
        None => Ok(()),
    }
}

fn scan_logits(logits: &[f32]) -> Result<RowScan, SamplerError> {
    check_row(logits)?;
    // Chunk maxima vectorize (a row is up to 152K values, 64 rows a step); the first chunk
    // holding the maximum then gives the lowest index among ties, as a scalar scan with a
    // strict `>` would.
    let (mut max, mut max_chunk) = (f32::NEG_INFINITY, 0);
    for (c, chunk) in logits.chunks(SCAN_CHUNK).enumerate() {
        let chunk_max = max_of(chunk);
        if chunk_max > max {
            (max, max_chunk) = (chunk_max, c);
        }
    }
    let start = max_chunk * SCAN_CHUNK;
    let within = logits[start..].iter().position(|&l| l == max).unwrap_or(0);
    Ok(RowScan { max, argmax: (start + within) as u32 })
}

/// Values per chunk of the vectorized row scans.
const SCAN_CHUNK: usize = 256;

/// The index of the first NaN or infinity in `row`, if any: branch-free within each chunk so
/// the pass vectorizes; the search for the culprit runs only in a bad chunk. The one check of
/// logits, shared by `check_row` (`sample_row`, `entropix_sample`) and the engine's check of
/// every strategy's rows.
pub fn first_non_finite(row: &[f32]) -> Option<usize> {
    let (c, chunk) =
        row.chunks(SCAN_CHUNK).enumerate().find(|(_, chunk)| !chunk.iter().fold(true, |ok, v| ok & v.is_finite()))?;
    chunk.iter().position(|v| !v.is_finite()).map(|i| c * SCAN_CHUNK + i)
}

/// Only copies the row when a history-dependent processor will modify it, so
/// plain greedy and plain sampling rows never allocate a vocab-sized buffer
/// for penalties (and greedy rows allocate nothing at all).
fn choose_token(row: &SampleInput<'_>, raw: &RowScan) -> Result<u32, SamplerError> {
    let params = row.params;
    let penalised = needs_penalties(params, row.prompt_token_ids, row.output_token_ids);
    if params.is_greedy() && !penalised {
        return match row.mask {
            Some(mask) if !mask.allows(raw.argmax) => {
                mask.argmax_allowed(row.logits).ok_or(SamplerError::AllTokensMasked)
            }
            _ => Ok(raw.argmax),
        };
    }
    let cfg = FilterConfig::from(params);
    let u = uniform(row.seed, row.step, 0);
    if !penalised && row.mask.is_none() {
        return Ok(sample_with_max(row.logits, raw.max, &cfg, u));
    }
    let mut logits = row.logits.to_vec();
    if penalised {
        apply_penalties(&mut logits, params, row.prompt_token_ids, row.output_token_ids);
    }
    if let Some(mask) = row.mask {
        mask.apply(&mut logits);
    }
    if !logits.iter().any(|&l| l > f32::NEG_INFINITY) {
        return Err(SamplerError::AllTokensMasked);
    }
    Ok(sample_filtered(&logits, &cfg, u))
}
