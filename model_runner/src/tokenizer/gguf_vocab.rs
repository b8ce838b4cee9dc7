//! Builds the tokenizer from the vocabulary embedded in a GGUF file, so a model needs no
//! separate tokenizer.json.
//!
//! Two vocabulary kinds: byte-level BPE (`tokenizer.ggml.model = "gpt2"`: SmolLM2, Qwen2/2.5/3,
//! Llama 3), built here with the pre-tokenizer per `tokenizer.ggml.pre` from `pretokenizer.rs`;
//! and SentencePiece (`"llama"`: Llama 1/2, Mistral, Gemma, TinyLlama), built in `spm_vocab.rs`.
//! What both share is here: token types, added tokens, BOS/EOS and the end-of-turn ids.

use candle_core::quantized::gguf_file::Content;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer as HfTokenizer};

use super::gguf_metadata as meta;
use super::pretokenizer::pipeline_for;
use super::{spm_vocab, token_type, Tokenizer, TokenizerError, VocabKind, END_OF_TURN_TOKENS};

impl Tokenizer {
    pub fn from_gguf(content: &Content) -> Result<Self, TokenizerError> {
        let md = &content.metadata;
        let model = meta::string(md, "tokenizer.ggml.model")?
            .ok_or_else(|| TokenizerError::MissingMetadata("tokenizer.ggml.model".into()))?;
        let vocab_kind = match model.as_str() {
            "gpt2" => VocabKind::ByteLevel,
            "llama" => VocabKind::SentencePiece,
            other => return Err(TokenizerError::Unsupported(format!("tokenizer.ggml.model = {other:?}"))),
        };
        let tokens = meta::string_array(md, "tokenizer.ggml.tokens")?
            .ok_or_else(|| TokenizerError::MissingMetadata("tokenizer.ggml.tokens".into()))?;
        let token_types = match meta::i32_array(md, "tokenizer.ggml.token_type")? {
            Some(t) if t.len() == tokens.len() => t,
            Some(t) => {
                return Err(TokenizerError::MissingMetadata(format!(
                    "tokenizer.ggml.token_type has {} entries for {} tokens",
                    t.len(),
                    tokens.len()
                )))
            }
            None => vec![token_type::NORMAL; tokens.len()],
        };
        let mut tokenizer = match vocab_kind {
            VocabKind::ByteLevel => byte_level_tokenizer(md, &tokens)?,
            VocabKind::SentencePiece => spm_vocab::sentencepiece_tokenizer(md, &tokens)?,
        };
        register_added_tokens(&mut tokenizer, &tokens, &token_types);

        let bos_token_id = meta::token_id(md, "tokenizer.ggml.bos_token_id", tokens.len())?;
        let eos_token_id = meta::token_id(md, "tokenizer.ggml.eos_token_id", tokens.len())?;
        // llama.cpp's defaults when the file does not say: SentencePiece models want a BOS,
        // byte-level ones do not; neither appends an EOS.
        let add_bos_token =
            meta::boolean(md, "tokenizer.ggml.add_bos_token")?.unwrap_or(vocab_kind == VocabKind::SentencePiece);
        let add_eos_token = meta::boolean(md, "tokenizer.ggml.add_eos_token")?.unwrap_or(false);
        let bos = bos_token_id.filter(|_| add_bos_token).map(|id| (tokens[id as usize].as_str(), id));
        let eos = eos_token_id.filter(|_| add_eos_token).map(|id| (tokens[id as usize].as_str(), id));
        if bos.is_some() || eos.is_some() {
            tokenizer.with_post_processor(Some(special_tokens_processor(bos, eos)?));
        }

        let mut eos_token_ids: Vec<u32> = eos_token_id.into_iter().collect();
        for extra in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
            eos_token_ids.extend(meta::token_id(md, extra, tokens.len())?);
        }
        eos_token_ids.extend(END_OF_TURN_TOKENS.iter().filter_map(|t| tokenizer.token_to_id(t)));
        let mut seen = Vec::new();
        eos_token_ids.retain(|id| {
            !seen.contains(id) && {
                seen.push(*id);
                true
            }
        });

        Ok(Self {
            tokenizer,
            bos_token_id,
            eos_token_ids,
            chat_template: meta::string(md, "tokenizer.chat_template")?,
            add_bos_token,
            vocab_size: tokens.len(),
            token_types,
            vocab_kind,
        })
    }
}

/// The GPT-2-style tokenizer: BPE over byte-level symbols with the file's merges, split by the
/// pre-tokenizer `tokenizer.ggml.pre` names.
fn byte_level_tokenizer(md: &meta::Metadata, tokens: &[String]) -> Result<HfTokenizer, TokenizerError> {
    let merges = meta::string_array(md, "tokenizer.ggml.merges")?
        .ok_or_else(|| TokenizerError::MissingMetadata("tokenizer.ggml.merges".into()))?;
    let pre = meta::string(md, "tokenizer.ggml.pre")?;
    let (normalizer, pre_tokenizer) = pipeline_for(pre.as_deref())?;
    let mut tokenizer = HfTokenizer::new(build_bpe(tokens, &merges)?);
    if let Some(n) = normalizer {
        tokenizer.with_normalizer(Some(n));
    }
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    Ok(tokenizer)
}

/// Token text -> id, keeping the first id of a duplicated text as llama.cpp's token_to_id does
/// (rev + collect lets earlier ids overwrite later ones).
pub(super) fn vocab_of(tokens: &[String]) -> Vocab {
    tokens.iter().enumerate().rev().map(|(id, t)| (t.clone(), id as u32)).collect()
}

fn build_bpe(tokens: &[String], merges: &[String]) -> Result<BPE, TokenizerError> {
    let merges = merges
        .iter()
        .map(|m| {
            // Search from index 1 so a merge whose left side is itself a space still splits
            // (llama.cpp does the same); byte-level tokens never contain a space otherwise.
            m.char_indices()
                .skip(1)
                .find(|&(_, c)| c == ' ')
                .map(|(i, _)| (m[..i].to_string(), m[i + 1..].to_string()))
                .ok_or_else(|| TokenizerError::MissingMetadata(format!("malformed merge {m:?}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Byte-level vocabularies contain all 256 byte symbols, so no unk token or byte_fallback
    // is needed: every input is representable.
    BPE::builder().vocab_and_merges(vocab_of(tokens), merges).build().map_err(|e| TokenizerError::Build(e.to_string()))
}

/// Control and unknown tokens become special added tokens (matched whole in text, skipped on
/// `skip_special_tokens`), as llama.cpp treats both; user-defined tokens are matched whole but
/// kept on decode, which is what HF does for non-special added tokens (e.g. Qwen2.5's
/// `<tool_call>`, Gemma's whitespace runs and HTML tags) and what llama.cpp does for
/// USER_DEFINED. All are matched in the raw text, before any normalizer.
fn register_added_tokens(tokenizer: &mut HfTokenizer, tokens: &[String], types: &[i32]) {
    let added = |wanted: &[i32], special: bool| -> Vec<AddedToken> {
        tokens
            .iter()
            .zip(types)
            .filter(|(_, t)| wanted.contains(t))
            .map(|(tok, _)| AddedToken::from(tok.clone(), special).normalized(false))
            .collect()
    };
    tokenizer.add_special_tokens(&added(&[token_type::CONTROL, token_type::UNKNOWN], true));
    tokenizer.add_tokens(&added(&[token_type::USER_DEFINED], false));
}

/// `encode(.., add_special_tokens = true)` puts the BOS before and the EOS after the text,
/// each only if the model asks for it.
fn special_tokens_processor(
    bos: Option<(&str, u32)>,
    eos: Option<(&str, u32)>,
) -> Result<TemplateProcessing, TokenizerError> {
    let (bos_text, eos_text) = (bos.map(|(t, _)| t), eos.map(|(t, _)| t));
    let around = |seq: &str, type_id: &str| -> String {
        let parts = [
            bos_text.map(|t| format!("{t}{type_id}")),
            Some(format!("{seq}{type_id}")),
            eos_text.map(|t| format!("{t}{type_id}")),
        ];
        parts.into_iter().flatten().collect::<Vec<_>>().join(" ")
    };
    let special_tokens: Vec<(String, u32)> = bos.into_iter().chain(eos).map(|(t, id)| (t.to_string(), id)).collect();
    TemplateProcessing::builder()
        .try_single(around("$A", ""))
        .and_then(|b| b.try_pair(format!("{} {}", around("$A", ""), around("$B", ":1"))))
        .map_err(TokenizerError::Build)?
        .special_tokens(special_tokens)
        .build()
        .map_err(|e| TokenizerError::Build(e.to_string()))
}
