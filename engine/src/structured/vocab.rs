//! The llguidance view of our tokenizer: a `TokTrie` over every token's bytes plus a
//! tokenize function (llguidance uses it to turn grammar-forced text into tokens).
//!
//! `toktrie_hf_tokenizers` would do this, but it depends on `tokenizers` 0.21 and we use
//! 0.22, so the byte-level vocabulary is decoded here (same conventions as that crate).

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
        let byte_of = byte_decoder();
        let mut words: Vec<Vec<u8>> = Vec::with_capacity(vocab_size);
        let mut undecodable = 0usize;
        for id in 0..vocab_size as u32 {
            let word = match tok.id_to_token(id) {
                None => special_word(&format!("<[{id}]>")),
                // Control tokens (EOS, <|im_start|>, ...) get toktrie's special marker so no
                // text grammar can ever produce them; EOS is re-admitted by llguidance itself
                // exactly when the grammar may end.
                Some(t) if tok.is_special(id) || !is_text_type(tok.token_type(id)) => special_word(&t),
                // User-defined added tokens (e.g. Qwen's `<tool_call>`) are stored as plain
                // text, not in the byte-level alphabet, and decode to that text.
                Some(t) if tok.token_type(id) == Some(token_type::USER_DEFINED) => t.into_bytes(),
                // llama.cpp byte tokens are written `<0xAB>`.
                Some(t) if tok.token_type(id) == Some(token_type::BYTE) => match parse_byte(&t) {
                    Some(b) => vec![b],
                    None => {
                        undecodable += 1;
                        special_word(&format!("<[{id}]>"))
                    }
                },
                Some(t) => match t.chars().map(&byte_of).collect::<Option<Vec<u8>>>() {
                    Some(b) => b,
                    None => {
                        // Not byte-level text: leave it unreachable rather than guess.
                        undecodable += 1;
                        special_word(&format!("<[{id}]>"))
                    }
                },
            };
            words.push(word);
        }
        // A handful of odd entries is tolerable; a vocabulary that is mostly not in the
        // GPT-2 byte alphabet (SentencePiece) would give wrong masks everywhere.
        if undecodable > n_tok / 100 {
            return Err(StructuredError::UnsupportedTokenizer(format!(
                "{undecodable} of {n_tok} tokens are not byte-level BPE tokens"
            )));
        }
        if undecodable > 0 {
            tracing::warn!(undecodable, "structured outputs: tokens outside the byte-level alphabet are never allowed");
        }
        let mut info = TokRxInfo::new(vocab_size as u32, eos[0]);
        info.tok_bos = tok.bos_token_id;
        // TokTrie::from and with_eos_tokens assert on these; both were checked above.
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos);
        Ok(Self { tokenizer: tok.tokenizer.clone(), trie })
    }
}

impl TokenizerEnv for GgufTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Canonical tokenization of text the grammar forces. Must never return a special token
    /// for text: our tokenizer maps e.g. a literal `<|im_end|>` in text to the control token,
    /// which the grammar (working on bytes) would then reject; such text, and anything the
    /// tokenizer fails on, falls back to the trie's greedy tokenization.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.tokenize_with_greedy_fallback(s, |text| match self.tokenizer.encode(text, false) {
            Ok(enc) if !enc.get_ids().iter().any(|&t| self.trie.is_special_token(t)) => enc.get_ids().to_vec(),
            _ => self.trie.greedy_tokenize(text.as_bytes()),
        })
    }
}

fn is_text_type(t: Option<i32>) -> bool {
    matches!(t, None | Some(token_type::NORMAL) | Some(token_type::USER_DEFINED) | Some(token_type::BYTE))
}

fn parse_byte(t: &str) -> Option<u8> {
    let hex = t.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

fn special_word(name: &str) -> Vec<u8> {
    let mut w = Vec::with_capacity(name.len() + 1);
    w.push(TokTrie::SPECIAL_TOKEN_MARKER);
    w.extend_from_slice(name.as_bytes());
    w
}

/// Inverse of GPT-2's `bytes_to_unicode`: printable Latin-1 bytes stand for themselves, the
/// other 68 bytes are mapped in order to U+0100.. .
fn byte_decoder() -> impl Fn(char) -> Option<u8> {
    let mut table = [None; 0x100 + 68];
    let mut next = 0x100usize;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        if printable {
            table[b as usize] = Some(b);
        } else {
            table[next] = Some(b);
            next += 1;
        }
    }
    move |c: char| table.get(c as usize).copied().flatten()
}

#[cfg(test)]
mod tests {
    use super::byte_decoder;

    #[test]
    fn gpt2_byte_alphabet() {
        let d = byte_decoder();
        assert_eq!(d('a'), Some(b'a'));
        assert_eq!(d('Ġ'), Some(b' ')); // U+0120
        assert_eq!(d('Ċ'), Some(b'\n')); // U+010A
        assert_eq!(d('\u{0100}'), Some(0x00));
        assert_eq!(d('\u{0143}'), Some(0xAD));
        assert_eq!(d('é'), Some(0xE9));
        assert_eq!(d('\u{0144}'), None);
        assert_eq!(d(' '), None);
    }
}
