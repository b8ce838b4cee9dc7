//! SentencePiece vocabularies from GGUF (`tokenizer.ggml.model = "llama"`: Llama 1/2, Mistral,
//! Gemma, TinyLlama), as the `tokenizers` crate's own pieces in the arrangement Hugging Face's
//! `LlamaConverter` gives these models:
//! - model: BPE with byte fallback (`<0xAB>` tokens for bytes no piece covers) and merges
//!   derived from the piece scores (`spm_merges.rs`);
//! - normalizer: spaces written `▁`, and with `tokenizer.ggml.add_space_prefix` a `▁` before
//!   the text, and before each stretch of text after an added token, as llama.cpp does;
//! - no pre-tokenizer: SentencePiece merges across word boundaries;
//! - decoder: `▁` back to a space, byte tokens joined into UTF-8, and with add_space_prefix the
//!   one space the prefix put at the very start removed again.
//!
//! Added tokens (control, unknown, user-defined) and BOS/EOS are `gguf_vocab.rs`'s, shared with
//! byte-level vocabularies. `tokenizer.ggml.pre` and `tokenizer.ggml.merges` are ignored, as
//! llama.cpp ignores them for SentencePiece.

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::{DecoderWrapper, NormalizerWrapper, Tokenizer as HfTokenizer};

use super::gguf_metadata::{self as meta, Metadata};
use super::gguf_vocab::vocab_of;
use super::spm_merges::merges_from_scores;
use super::TokenizerError;

/// SentencePiece's space marker, U+2581.
pub(super) const SPACE_MARKER: &str = "\u{2581}";

pub(super) fn sentencepiece_tokenizer(md: &Metadata, tokens: &[String]) -> Result<HfTokenizer, TokenizerError> {
    // llama.cpp would tokenize a vocabulary without scores by position alone; that is not
    // what the model was trained with, so it is refused rather than guessed.
    let scores = meta::f32_array(md, "tokenizer.ggml.scores")?.ok_or_else(|| {
        TokenizerError::Unsupported(
            "SentencePiece vocabulary (tokenizer.ggml.model = \"llama\") without tokenizer.ggml.scores: \
             the merge order is unknown"
                .into(),
        )
    })?;
    if scores.len() != tokens.len() {
        return Err(TokenizerError::MissingMetadata(format!(
            "tokenizer.ggml.scores has {} entries for {} tokens",
            scores.len(),
            tokens.len()
        )));
    }
    // llama.cpp's default for SentencePiece when the key is absent (Llama 2, Mistral); Gemma
    // writes false.
    let add_space_prefix = meta::boolean(md, "tokenizer.ggml.add_space_prefix")?.unwrap_or(true);
    let unk = meta::token_id(md, "tokenizer.ggml.unknown_token_id", tokens.len())?;

    let vocab = vocab_of(tokens);
    let merges = merges_from_scores(tokens, &scores, &vocab);
    let mut bpe = BPE::builder().vocab_and_merges(vocab, merges).byte_fallback(true);
    // Only reached for a character whose bytes lack `<0xAB>` tokens, as in `LlamaConverter`.
    if let Some(unk) = unk {
        bpe = bpe.unk_token(tokens[unk as usize].clone()).fuse_unk(true);
    }
    let bpe = bpe.build().map_err(|e| TokenizerError::Build(e.to_string()))?;

    let mut tokenizer = HfTokenizer::new(bpe);
    tokenizer.with_normalizer(Some(normalizer(add_space_prefix)?));
    tokenizer.with_decoder(Some(decoder(add_space_prefix)?));
    Ok(tokenizer)
}

fn normalizer(add_space_prefix: bool) -> Result<NormalizerWrapper, TokenizerError> {
    let spaces: NormalizerWrapper =
        Replace::new(" ", SPACE_MARKER).map_err(|e| TokenizerError::Build(e.to_string()))?.into();
    if !add_space_prefix {
        return Ok(spaces);
    }
    // The normalizer runs on each stretch of text between added tokens, so every stretch gets
    // the prefix: llama.cpp adds it after every special or user-defined token too.
    Ok(NormalizerSequence::new(vec![Prepend::new(SPACE_MARKER.into()).into(), spaces]).into())
}

fn decoder(add_space_prefix: bool) -> Result<DecoderWrapper, TokenizerError> {
    let mut steps: Vec<DecoderWrapper> = vec![
        Replace::new(SPACE_MARKER, " ").map_err(|e| TokenizerError::Build(e.to_string()))?.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if add_space_prefix {
        // After Fuse there is one string: this strips the first decoded token's leading space
        // only, the one the prefix added (llama.cpp's detokenizer does the same).
        steps.push(Strip::new(' ', 1, 0).into());
    }
    Ok(DecoderSequence::new(steps).into())
}
