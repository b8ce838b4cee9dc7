//! Pre-tokenizer (and normalizer) per `tokenizer.ggml.pre`.
//!
//! Each entry reproduces the `pre_tokenizer` of the original model's HF tokenizer.json; the
//! table in llama.cpp's `llama-vocab.cpp` (which maps the same names to regex lists) is the
//! cross-reference for which names share a pipeline.

use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior};

use super::TokenizerError;

/// Qwen2/2.5/3 split regex (HF tokenizer.json of Qwen2.5; llama.cpp `LLAMA_VOCAB_PRE_TYPE_QWEN2`).
/// Like GPT-4's cl100k but numbers are split into single digits (`\p{N}`).
pub const QWEN2_SPLIT_REGEX: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Llama 3 split regex (`llama-bpe`): as Qwen2's but numbers are grouped in runs of 1-3 digits.
pub const LLAMA3_SPLIT_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Returns the optional normalizer and the pre-tokenizer for a `tokenizer.ggml.pre` value.
pub(super) fn pipeline_for(
    pre: Option<&str>,
) -> Result<(Option<NormalizerWrapper>, PreTokenizerWrapper), TokenizerError> {
    // GPT-2's own regex split; add_prefix_space=false everywhere because none of these models
    // prepend a space to the text (tokenizer.ggml.add_space_prefix is false for them).
    let gpt2_byte_level = || ByteLevel::new(false, true, true);
    Ok(match pre {
        None | Some("default") | Some("gpt2") => (None, gpt2_byte_level().into()),
        // StarCoder-family vocabularies (SmolLM/SmolLM2 reuse StarCoder's tokenizer): every
        // digit is its own pre-token, then the GPT-2 regex.
        Some("smollm") | Some("starcoder") | Some("refact") => {
            let seq = Sequence::new(vec![Digits::new(true).into(), gpt2_byte_level().into()]);
            (None, seq.into())
        }
        // Qwen's tokenizer.json also NFC-normalises input before splitting.
        Some("qwen2") => (Some(NFC.into()), split_then_bytes(QWEN2_SPLIT_REGEX)?),
        Some("llama-bpe") => (None, split_then_bytes(LLAMA3_SPLIT_REGEX)?),
        Some(other) => {
            return Err(TokenizerError::Unsupported(format!(
                "tokenizer.ggml.pre = {other:?} (supported: default, gpt2, smollm, starcoder, \
                 refact, qwen2, llama-bpe)"
            )))
        }
    })
}

/// Regex split (matches kept as their own pieces) followed by a byte-level mapping that does
/// no further splitting.
fn split_then_bytes(regex: &str) -> Result<PreTokenizerWrapper, TokenizerError> {
    let split = Split::new(SplitPattern::Regex(regex.to_string()), SplitDelimiterBehavior::Isolated, false)
        .map_err(|e| TokenizerError::Build(format!("pre-tokenizer regex: {e}")))?;
    Ok(Sequence::new(vec![split.into(), ByteLevel::new(false, false, false).into()]).into())
}
