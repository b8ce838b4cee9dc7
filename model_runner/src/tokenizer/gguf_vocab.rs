//! Builds the tokenizer from the vocabulary embedded in a GGUF file, so a model needs no
//! separate tokenizer.json.
//!
//! Only byte-level BPE (`tokenizer.ggml.model = "gpt2"`) is supported: that covers SmolLM2,
//! Qwen2/2.5/3 and Llama 3. SentencePiece models (`"llama"`) are rejected with `Unsupported`.
//! The pre-tokenizer per `tokenizer.ggml.pre` lives in `pretokenizer.rs`.

use candle_core::quantized::gguf_file::Content;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer as HfTokenizer};

use super::gguf_metadata as meta;
use super::pretokenizer::pipeline_for;
use super::{token_type, Tokenizer, TokenizerError, END_OF_TURN_TOKENS};

impl Tokenizer {
    pub fn from_gguf(content: &Content) -> Result<Self, TokenizerError> {
        let md = &content.metadata;
        let model = meta::string(md, "tokenizer.ggml.model")?
            .ok_or_else(|| TokenizerError::MissingMetadata("tokenizer.ggml.model".into()))?;
        match model.as_str() {
            "gpt2" => {}
            "llama" => {
                return Err(TokenizerError::Unsupported(
                    "SentencePiece tokenizer (tokenizer.ggml.model = \"llama\") is not supported; \
                     only byte-level BPE (\"gpt2\") models are"
                        .into(),
                ))
            }
            other => return Err(TokenizerError::Unsupported(format!("tokenizer.ggml.model = {other:?}"))),
        }
        let tokens = meta::string_array(md, "tokenizer.ggml.tokens")?
            .ok_or_else(|| TokenizerError::MissingMetadata("tokenizer.ggml.tokens".into()))?;
        let merges = meta::string_array(md, "tokenizer.ggml.merges")?
            .ok_or_else(|| TokenizerError::MissingMetadata("tokenizer.ggml.merges".into()))?;
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
        let pre = meta::string(md, "tokenizer.ggml.pre")?;
        let (normalizer, pre_tokenizer) = pipeline_for(pre.as_deref())?;

        let bpe = build_bpe(&tokens, &merges)?;
        let mut tokenizer = HfTokenizer::new(bpe);
        if let Some(n) = normalizer {
            tokenizer.with_normalizer(Some(n));
        }
        tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
        tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
        register_added_tokens(&mut tokenizer, &tokens, &token_types);

        let bos_token_id = meta::token_id(md, "tokenizer.ggml.bos_token_id", tokens.len())?;
        let eos_token_id = meta::token_id(md, "tokenizer.ggml.eos_token_id", tokens.len())?;
        // llama.cpp defaults add_bos to false for gpt2-style vocabularies.
        let add_bos_token = meta::boolean(md, "tokenizer.ggml.add_bos_token")?.unwrap_or(false);
        if let (true, Some(bos)) = (add_bos_token, bos_token_id) {
            tokenizer.with_post_processor(Some(bos_processor(&tokens[bos as usize], bos)?));
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
        })
    }
}

fn build_bpe(tokens: &[String], merges: &[String]) -> Result<BPE, TokenizerError> {
    // Keep the first id of a duplicated text, as llama.cpp's token_to_id does (rev + collect
    // lets earlier ids overwrite later ones).
    let vocab: Vocab = tokens.iter().enumerate().rev().map(|(id, t)| (t.clone(), id as u32)).collect();
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
    BPE::builder().vocab_and_merges(vocab, merges).build().map_err(|e| TokenizerError::Build(e.to_string()))
}

/// Control tokens become special added tokens (matched whole in text, skipped on
/// `skip_special_tokens`); user-defined tokens are matched whole but kept on decode, which is
/// what HF does for non-special added tokens (e.g. Qwen2.5's `<tool_call>`) and what
/// llama.cpp's detokenizer does for USER_DEFINED.
fn register_added_tokens(tokenizer: &mut HfTokenizer, tokens: &[String], types: &[i32]) {
    let added = |wanted: i32, special: bool| -> Vec<AddedToken> {
        tokens
            .iter()
            .zip(types)
            .filter(|(_, &t)| t == wanted)
            .map(|(tok, _)| AddedToken::from(tok.clone(), special).normalized(false))
            .collect()
    };
    tokenizer.add_special_tokens(&added(token_type::CONTROL, true));
    tokenizer.add_tokens(&added(token_type::USER_DEFINED, false));
}

fn bos_processor(bos_text: &str, bos: u32) -> Result<TemplateProcessing, TokenizerError> {
    TemplateProcessing::builder()
        .try_single(format!("{bos_text} $A"))
        .and_then(|b| b.try_pair(format!("{bos_text} $A {bos_text}:1 $B:1")))
        .map_err(TokenizerError::Build)?
        .special_tokens(vec![(bos_text.to_string(), bos)])
        .build()
        .map_err(|e| TokenizerError::Build(e.to_string()))
}
