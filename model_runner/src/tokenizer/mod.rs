//! The engine's tokenizer, [`Tokenizer`]: a HuggingFace `tokenizers::Tokenizer` with the
//! special-token ids, token types and chat template the engine needs, built from a GGUF file's
//! embedded vocabulary (`gguf_vocab.rs`: byte-level BPE, or SentencePiece in `spm_vocab.rs`) or
//! a Hugging Face checkpoint's tokenizer.json (`hf_checkpoint.rs`). `token_bytes.rs` says which
//! bytes each token stands for. Beside it, the text side of a checkpoint that is not weights: the
//! chat template renderer ([`chat_template`]) and the sampling values the checkpoint recommends
//! ([`recommended_sampling`]).

use tokenizers::Tokenizer as HfTokenizer;

pub mod chat_template;
mod gguf_metadata;
mod gguf_vocab;
mod hf_checkpoint;
mod pretokenizer;
pub mod recommended_sampling;
mod spm_merges;
mod spm_vocab;
mod token_bytes;

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
/// GGUF names a different `eos_token_id` (e.g. a base-model `<|endoftext|>`, or Gemma's `<eos>`
/// where its chat turns end in `<end_of_turn>`).
const END_OF_TURN_TOKENS: &[&str] = &["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<end_of_turn>"];

/// How a vocabulary writes text into its tokens, which decides the bytes a token stands for
/// ([`Tokenizer::token_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VocabKind {
    /// GPT-2 byte-level BPE (GGUF `"gpt2"`): every byte is one printable character, e.g. a
    /// space is `Ġ`.
    ByteLevel,
    /// SentencePiece (GGUF `"llama"`): text as is with spaces written `▁`, and bytes the pieces
    /// do not cover as byte-fallback tokens `<0xAB>`.
    SentencePiece,
}

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

// Defined here rather than in a file of its own so that its constructors, in the child modules
// `gguf_vocab` and `hf_checkpoint`, can fill the private `token_types`.
#[derive(Clone)]
pub struct Tokenizer {
    pub tokenizer: HfTokenizer,
    pub bos_token_id: Option<u32>,
    /// `eos_token_id` first, then every end-of-turn token present in the vocabulary.
    pub eos_token_ids: Vec<u32>,
    pub chat_template: Option<String>,
    pub add_bos_token: bool,
    pub vocab_size: usize,
    /// GGUF token type per id (see [`token_type`]); `NORMAL` when the file has none.
    token_types: Vec<i32>,
    vocab_kind: VocabKind,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The HF tokenizer's own Debug dumps the whole vocabulary; keep it out.
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size)
            .field("bos_token_id", &self.bos_token_id)
            .field("eos_token_ids", &self.eos_token_ids)
            .field("add_bos_token", &self.add_bos_token)
            .field("vocab_kind", &self.vocab_kind)
            .field("has_chat_template", &self.chat_template.is_some())
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
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

    /// True for control and unknown tokens (GGUF types 3 and 2, llama.cpp's "special"
    /// attributes): the ids `decode(.., true)` drops.
    pub fn is_special(&self, id: u32) -> bool {
        matches!(self.token_type(id), Some(token_type::CONTROL | token_type::UNKNOWN))
    }

    pub fn vocab_kind(&self) -> VocabKind {
        self.vocab_kind
    }

    /// GGUF token type of `id`, see [`token_type`].
    pub fn token_type(&self, id: u32) -> Option<i32> {
        self.token_types.get(id as usize).copied()
    }
}
