//! The tokenizer of a Hugging Face checkpoint directory (`tokenizer.json`, with EOS, BOS and
//! the chat template from `tokenizer_config.json` / `generation_config.json`), wrapped as a
//! [`Tokenizer`] so the engine treats both model formats alike.

use std::path::Path;

use serde_json::Value;
use tokenizers::{ModelWrapper, Tokenizer as HfTokenizer};

use super::token_bytes::byte_token_value;
use super::{token_type, Tokenizer, TokenizerError, VocabKind, END_OF_TURN_TOKENS};

impl Tokenizer {
    /// Wraps an already built Hugging Face tokenizer. `eos_token_ids` gets every end-of-turn
    /// token of the vocabulary appended (as `from_gguf` does), duplicates removed.
    pub fn from_hf(
        tokenizer: HfTokenizer,
        bos_token_id: Option<u32>,
        eos_token_ids: Vec<u32>,
        chat_template: Option<String>,
        add_bos_token: bool,
    ) -> Self {
        let vocab_size = tokenizer.get_vocab_size(true);
        let mut token_types = vec![token_type::NORMAL; vocab_size];
        for (id, added) in tokenizer.get_added_tokens_decoder() {
            if let Some(t) = token_types.get_mut(id as usize) {
                *t = if added.special { token_type::CONTROL } else { token_type::USER_DEFINED };
            }
        }
        let mut eos = eos_token_ids;
        eos.extend(END_OF_TURN_TOKENS.iter().filter_map(|t| tokenizer.token_to_id(t)));
        let mut seen = Vec::new();
        eos.retain(|id| {
            !seen.contains(id) && {
                seen.push(*id);
                true
            }
        });
        let vocab_kind = vocab_kind_of(&tokenizer);
        if vocab_kind == VocabKind::SentencePiece {
            // tokenizer.json has no token types: byte-fallback tokens are known by their name.
            for (text, id) in tokenizer.get_vocab(false) {
                if let (Some(t), Some(_)) = (token_types.get_mut(id as usize), byte_token_value(&text)) {
                    *t = token_type::BYTE;
                }
            }
        }
        Self {
            tokenizer,
            bos_token_id,
            eos_token_ids: eos,
            chat_template,
            add_bos_token,
            vocab_size,
            token_types,
            vocab_kind,
        }
    }

    /// Reads `dir/tokenizer.json` plus the optional `tokenizer_config.json`,
    /// `generation_config.json` and `chat_template.jinja`. `config_eos` / `config_bos` are the
    /// ids from `config.json`, used when the tokenizer files name none.
    pub fn from_hf_dir(dir: &Path, config_eos: &[u32], config_bos: Option<u32>) -> Result<Self, TokenizerError> {
        let path = dir.join("tokenizer.json");
        let tokenizer =
            HfTokenizer::from_file(&path).map_err(|e| TokenizerError::Build(format!("{}: {e}", path.display())))?;
        let tok_cfg = read_json(&dir.join("tokenizer_config.json"))?;
        let gen_cfg = read_json(&dir.join("generation_config.json"))?;
        let token_id = |key: &str| -> Option<Option<u32>> {
            let v = tok_cfg.as_ref()?.get(key)?;
            Some(token_text(v).and_then(|t| tokenizer.token_to_id(t)))
        };
        // tokenizer_config's EOS is the tokenizer's own; generation_config lists the ids
        // `generate` stops on (Qwen3: <|im_end|> and <|endoftext|>).
        let mut eos: Vec<u32> = token_id("eos_token").flatten().into_iter().collect();
        eos.extend(gen_cfg.as_ref().map(|g| ids(g.get("eos_token_id"))).unwrap_or_default());
        eos.extend_from_slice(config_eos);
        // An explicit `"bos_token": null` (Qwen) means no BOS even if config.json names one.
        let bos = token_id("bos_token").unwrap_or(config_bos);
        let add_bos = tok_cfg.as_ref().and_then(|c| c.get("add_bos_token")).and_then(Value::as_bool).unwrap_or(false);
        let template = match tok_cfg.as_ref().and_then(|c| c.get("chat_template")) {
            Some(t) => chat_template(t),
            None => None,
        };
        let template = match template {
            Some(t) => Some(t),
            None => std::fs::read_to_string(dir.join("chat_template.jinja")).ok(),
        };
        Ok(Self::from_hf(tokenizer, bos, eos, template, add_bos))
    }
}

/// SentencePiece-style when the model can fall back to `<0xAB>` byte tokens (Llama 2, Mistral,
/// Gemma tokenizer.json) or is a Unigram; anything else is taken as byte-level BPE, and a
/// vocabulary that is neither shows up as tokens `token_bytes` cannot decode.
fn vocab_kind_of(tokenizer: &HfTokenizer) -> VocabKind {
    match tokenizer.get_model() {
        ModelWrapper::BPE(bpe) if bpe.byte_fallback => VocabKind::SentencePiece,
        ModelWrapper::Unigram(_) => VocabKind::SentencePiece,
        _ => VocabKind::ByteLevel,
    }
}

fn read_json(path: &Path) -> Result<Option<Value>, TokenizerError> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(None);
    };
    serde_json::from_str(&text).map(Some).map_err(|e| TokenizerError::Build(format!("{}: {e}", path.display())))
}

/// A special token as `tokenizer_config.json` writes it: a string or an AddedToken dict.
fn token_text(v: &Value) -> Option<&str> {
    v.as_str().or_else(|| v.get("content").and_then(Value::as_str))
}

fn ids(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_u64).map(|i| i as u32).collect(),
        Some(v) => v.as_u64().map(|i| vec![i as u32]).unwrap_or_default(),
        None => Vec::new(),
    }
}

/// A template string, or the `default` entry of a list of named templates.
fn chat_template(v: &Value) -> Option<String> {
    if let Some(s) = v.as_str() {
        return Some(s.to_string());
    }
    let list = v.as_array()?;
    let named = |name: &str| {
        list.iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
            .and_then(|t| t.get("template"))
            .and_then(Value::as_str)
    };
    named("default")
        .or_else(|| list.first().and_then(|t| t.get("template")).and_then(Value::as_str))
        .map(str::to_string)
}
