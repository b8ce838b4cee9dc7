//! The llguidance view of our tokenizer: a `TokTrie` over every token's bytes plus a
//! tokenize function (llguidance uses it to turn grammar-forced text into tokens).
//!
//! `toktrie_hf_tokenizers` would do this, but it depends on `tokenizers` 0.21 and we use
//! 0.22; the bytes of each token come from `Tokenizer::token_bytes`, which knows both
//! byte-level BPE and SentencePiece vocabularies.

use entrobatch_model_runner::tokenizer::token_type;
use entrobatch_model_runner::Tokenizer;
use toktrie::{TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use super::spec::StructuredError;

/// Tokenizer + trie handed to llguidance (as `TokEnv = Arc<dyn TokenizerEnv>`).
pub(crate) struct GgufTokEnv {
    tokenizer: tokenizers::Tokenizer,
    trie: TokTrie,
}

impl GgufTokEnv {
    /// `vocab_size` is the logits row length; ids past the tokenizer become unreachable
    /// special tokens so llguidance's masks have exactly the row's length.
    pub(crate) fn new(tok: &Tokenizer, vocab_size: usize) -> Result<Self, StructuredError> {
        let n_tok = tok.vocab_size.max(tok.tokenizer.get_vocab_size(true));
        if vocab_size < n_tok {
            return Err(StructuredError::UnsupportedTokenizer(format!(
                "logits row has {vocab_size} entries but the tokenizer has {n_tok} tokens"
            )));
        }
        if vocab_size > u32::MAX as usize / 2 {
            return Err(StructuredError::UnsupportedTokenizer(format!(
                "vocabulary of {vocab_size} tokens is too large"
            )));
        }
        let eos: Vec<u32> = tok.eos_token_ids.iter().copied().filter(|&id| (id as usize) < n_tok).collect();
        if eos.is_empty() {
            // llguidance ends a grammar by allowing EOS; without one nothing could finish.
            return Err(StructuredError::UnsupportedTokenizer("the tokenizer defines no EOS token".into()));
        }
        let mut words: Vec<Vec<u8>> = Vec::with_capacity(vocab_size);
        let mut undecodable = 0usize;
        for id in 0..vocab_size as u32 {
            let word = match (tok.token_bytes(id), tok.id_to_token(id)) {
                (Some(bytes), _) => bytes,
                (None, None) => special_word(&format!("<[{id}]>")),
                // A text token whose bytes are unknown (a character outside the byte-level
                // alphabet, a malformed byte token): unreachable rather than guessed.
                (None, Some(_)) if is_text_type(tok.token_type(id)) => {
                    undecodable += 1;
                    special_word(&format!("<[{id}]>"))
                }
                // Control tokens (EOS, <|im_start|>, <start_of_turn>, ...) get toktrie's
                // special marker so no text grammar can ever produce them; EOS is re-admitted
                // by llguidance itself exactly when the grammar may end.
                (None, Some(name)) => special_word(&name),
            };
            words.push(word);
        }
        // A handful of odd entries is tolerable; a vocabulary that is mostly not in the
        // alphabet its kind declares would give wrong masks everywhere.
        if undecodable > n_tok / 100 {
            return Err(StructuredError::UnsupportedTokenizer(format!(
                "{undecodable} of {n_tok} tokens are not {:?} tokens",
                tok.vocab_kind()
            )));
        }
        if undecodable > 0 {
            tracing::warn!(
                undecodable,
                "structured outputs: tokens outside the vocabulary's alphabet are never allowed"
            );
        }
        let mut info = TokRxInfo::new(vocab_size as u32, eos[0]);
        info.tok_bos = tok.bos_token_id;
        // TokTrie::from and with_eos_tokens assert on these; both were checked above.
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos);
        Ok(Self { tokenizer: tok.tokenizer.clone(), trie })
    }

    /// True when `ids` are text tokens whose bytes are exactly `bytes`.
    fn spells(&self, ids: &[TokenId], bytes: &[u8]) -> bool {
        !ids.iter().any(|&t| self.trie.is_special_token(t)) && self.trie.decode(ids) == bytes
    }
}

impl TokenizerEnv for GgufTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Canonical tokenization of text the grammar forces. The tokens must spell exactly that
    /// text: our tokenizer maps e.g. a literal `<|im_end|>` in text to the control token, and a
    /// SentencePiece vocabulary with add_space_prefix writes `▁` before the text, either of
    /// which the grammar (working on bytes) would then reject; such text, and anything the
    /// tokenizer fails on, falls back to the trie's greedy tokenization.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.tokenize_with_greedy_fallback(s, |text| match self.tokenizer.encode(text, false) {
            Ok(enc) if self.spells(enc.get_ids(), text.as_bytes()) => enc.get_ids().to_vec(),
            _ => self.trie.greedy_tokenize(text.as_bytes()),
        })
    }
}

fn is_text_type(t: Option<i32>) -> bool {
    matches!(t, None | Some(token_type::NORMAL) | Some(token_type::USER_DEFINED) | Some(token_type::BYTE))
}

fn special_word(name: &str) -> Vec<u8> {
    let mut w = Vec::with_capacity(name.len() + 1);
    w.push(TokTrie::SPECIAL_TOKEN_MARKER);
    w.extend_from_slice(name.as_bytes());
    w
}

#[cfg(test)]
mod tests {
    use entrobatch_model_runner::Tokenizer;
    use serde_json::json;
    use toktrie::{TokTrie, TokenizerEnv};

    use super::GgufTokEnv;
    use crate::detokenizer::tests::{gemma3, tiny_spm};
    use crate::structured::{GrammarLimits, StructuredBackend, StructuredOutput};

    fn token(env: &GgufTokEnv, tok: &Tokenizer, piece: &str) -> Vec<u8> {
        env.tok_trie().token(tok.token_id(piece).unwrap()).to_vec()
    }

    #[test]
    fn sentencepiece_tokens_are_their_bytes() {
        for prefix in [true, false] {
            let tok = tiny_spm(prefix);
            // A logits row longer than the vocabulary: the extra ids are unreachable.
            let env = GgufTokEnv::new(&tok, tok.vocab_size + 3).unwrap();
            assert_eq!(token(&env, &tok, "▁Hello"), b" Hello");
            assert_eq!(token(&env, &tok, "▁▁"), b"  ");
            assert_eq!(token(&env, &tok, "<0xC3>"), [0xC3]);
            assert_eq!(token(&env, &tok, "<tool_call>"), b"<tool_call>");
            for special in ["<unk>", "<s>", "</s>", "<start_of_turn>"] {
                assert_eq!(token(&env, &tok, special)[0], TokTrie::SPECIAL_TOKEN_MARKER, "{special}");
            }
            assert!(env.tok_trie().is_special_token(tok.vocab_size as u32 + 2));
            for text in ["Hello world", " Hello", "日本, 🦀 é"] {
                let ids = env.tokenize_bytes(text.as_bytes());
                assert_eq!(env.tok_trie().decode(&ids), text.as_bytes(), "prefix {prefix}: {text:?}");
                if !prefix {
                    // Without the prefix the tokenizer's own tokens spell the text.
                    assert_eq!(ids, tok.encode(text, false).unwrap(), "{text:?}");
                }
            }
        }
    }

    #[test]
    fn json_schema_on_gemma3() {
        let Some(tok) = gemma3(false) else { return };
        let backend = StructuredBackend::new(&tok, tok.vocab_size, GrammarLimits::default()).unwrap();
        let schema = json!({
            "type": "object",
            "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["name", "n"],
            "additionalProperties": false
        });
        let mut c = backend.compile(&StructuredOutput::JsonSchema(schema)).unwrap();
        let text = r#"{"name":"Zoë 日本 🦀","n":42}"#;
        let ids = tok.encode(text, false).unwrap();
        let start_of_turn = tok.token_id("<start_of_turn>").unwrap();
        for (i, &id) in ids.iter().enumerate() {
            let m = c.mask().unwrap();
            assert_eq!(m.len(), tok.vocab_size);
            assert!(m.allows(id), "token {i} ({:?}) not allowed", tok.id_to_token(id));
            assert!(!m.allows(start_of_turn) && tok.eos_token_ids.iter().all(|&e| !m.allows(e)));
            c.commit(id).unwrap();
        }
        assert!(c.is_finished());
        // A grammar of letters admits a piece without the space marker, never one with it.
        let mut fresh = backend.compile(&StructuredOutput::Regex("[a-z]+".into())).unwrap();
        let m = fresh.mask().unwrap();
        assert!(m.allows(tok.token_id("hello").unwrap()) && !m.allows(tok.token_id("▁hello").unwrap()));
    }
}
