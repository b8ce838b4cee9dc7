//! Builds a HuggingFace `tokenizers::Tokenizer` from the vocabulary embedded in a GGUF file,
//! so a model needs no separate tokenizer.json.
//!
//! Only byte-level BPE (`tokenizer.ggml.model = "gpt2"`) is supported: that covers SmolLM2,
//! Qwen2/2.5/3 and Llama 3. SentencePiece models (`"llama"`) are rejected with `Unsupported`.
//! The pre-tokenizer per `tokenizer.ggml.pre` lives in `tokenizer_pretok.rs`.

use candle_core::quantized::gguf_file::Content;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer};

// Helper files sit next to this one (src/tokenizer_*.rs) rather than in src/tokenizer/.
#[path = "tokenizer_gguf_meta.rs"]
mod meta;
#[path = "tokenizer_pretok.rs"]
mod pretok;
// `GgufTokenizer::from_hf` / `from_hf_dir`: the same wrapper around a Hugging Face tokenizer.json.
#[path = "hf_tokenizer.rs"]
mod hf;

use pretok::pipeline_for;

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp `llama_token_type`).
pub mod token_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

/// End-of-turn markers of common chat formats. Generation must stop on these even when the
/// GGUF names a different `eos_token_id` (e.g. a base-model `<|endoftext|>`).
const END_OF_TURN_TOKENS: &[&str] = &["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>"];

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("missing or malformed GGUF tokenizer metadata: {0}")]
    MissingMetadata(String),
    #[error("unsupported tokenizer: {0}")]
    Unsupported(String),
    #[error("failed to build tokenizer: {0}")]
    Build(String),
    #[error("encode failed: {0}")]
    Encode(String),
    #[error("decode failed: {0}")]
    Decode(String),
}

#[derive(Clone)]
pub struct GgufTokenizer {
    pub tokenizer: Tokenizer,
    pub bos_token_id: Option<u32>,
    /// `eos_token_id` first, then every end-of-turn token present in the vocabulary.
    pub eos_token_ids: Vec<u32>,
    pub chat_template: Option<String>,
    pub add_bos_token: bool,
    pub vocab_size: usize,
    /// GGUF token type per id (see [`token_type`]); `NORMAL` when the file has none.
    token_types: Vec<i32>,
}

impl std::fmt::Debug for GgufTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The HF tokenizer's own Debug dumps the whole vocabulary; keep it out.
        f.debug_struct("GgufTokenizer")
            .field("vocab_size", &self.vocab_size)
            .field("bos_token_id", &self.bos_token_id)
            .field("eos_token_ids", &self.eos_token_ids)
            .field("add_bos_token", &self.add_bos_token)
            .field("has_chat_template", &self.chat_template.is_some())
            .finish_non_exhaustive()
    }
}

impl GgufTokenizer {
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
        let mut tokenizer = Tokenizer::new(bpe);
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

    /// Encodes `text`; special tokens written in the text (e.g. `<|im_start|>`) always map to
    /// their single id. `add_special_tokens` only controls the BOS prefix (if the model wants one).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizerError> {
        let enc = self.tokenizer.encode(text, add_special_tokens).map_err(|e| TokenizerError::Encode(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decodes ids to text. Invalid UTF-8 (e.g. half of a multi-byte character) becomes U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizerError> {
        self.tokenizer.decode(ids, skip_special_tokens).map_err(|e| TokenizerError::Decode(e.to_string()))
    }

    /// Exact vocabulary lookup of a token's raw text (byte-level form, e.g. `"Ġworld"`).
    pub fn token_id(&self, token_text: &str) -> Option<u32> {
        self.tokenizer.token_to_id(token_text)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.tokenizer.id_to_token(id)
    }

    /// True for control tokens (GGUF type 3): the ids `decode(.., true)` drops.
    pub fn is_special(&self, id: u32) -> bool {
        self.token_type(id) == Some(token_type::CONTROL)
    }

    /// GGUF token type of `id`, see [`token_type`].
    pub fn token_type(&self, id: u32) -> Option<i32> {
        self.token_types.get(id as usize).copied()
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
fn register_added_tokens(tokenizer: &mut Tokenizer, tokens: &[String], types: &[i32]) {
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
