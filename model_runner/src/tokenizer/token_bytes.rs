//! The bytes a token stands for in decoded text, for the code that works on tokens as bytes
//! rather than text (llguidance's token trie for structured outputs, the streaming
//! detokenizer). The vocabulary's alphabet has its one owner here: GPT-2's byte-to-character
//! map for byte-level BPE, `▁` and `<0xAB>` byte tokens for SentencePiece.

use super::spm_vocab::SPACE_MARKER;
use super::{token_type, Tokenizer, VocabKind};

impl Tokenizer {
    /// The bytes token `id` puts into decoded text. `None` for ids outside the vocabulary, for
    /// tokens that stand for no text (control, unknown, unused), and for a normal byte-level
    /// token with a character outside GPT-2's byte alphabet. A SentencePiece `▁` is a space
    /// here even in the first token, where `decode` with add_space_prefix drops it.
    pub fn token_bytes(&self, id: u32) -> Option<Vec<u8>> {
        let text = self.tokenizer.id_to_token(id)?;
        match self.token_type(id).unwrap_or(token_type::NORMAL) {
            // Added tokens are stored as the text they stand for, in either kind.
            token_type::USER_DEFINED => Some(text.into_bytes()),
            token_type::BYTE => byte_token_value(&text).map(|b| vec![b]),
            token_type::NORMAL => match self.vocab_kind {
                VocabKind::ByteLevel => text.chars().map(gpt2_byte).collect(),
                VocabKind::SentencePiece => Some(text.replace(SPACE_MARKER, " ").into_bytes()),
            },
            _ => None,
        }
    }

    /// True for a SentencePiece byte-fallback token (`<0xAB>`). The decoder turns a whole run
    /// of these into UTF-8 at once (one U+FFFD per byte if the run is not valid), so the text
    /// of one depends on the byte tokens after it.
    pub fn is_byte_fallback(&self, id: u32) -> bool {
        self.vocab_kind == VocabKind::SentencePiece && self.token_type(id) == Some(token_type::BYTE)
    }
}

/// The byte of a llama.cpp byte token, written `<0xAB>`.
pub(super) fn byte_token_value(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// Inverse of GPT-2's `bytes_to_unicode`: the printable Latin-1 bytes stand for themselves; the
/// other 68 (0..=32, 127..=160 and 173, in that order) are U+0100 upwards.
fn gpt2_byte(c: char) -> Option<u8> {
    let printable = matches!(c, '!'..='~' | '\u{A1}'..='\u{AC}' | '\u{AE}'..='\u{FF}');
    if printable {
        return Some(c as u8);
    }
    match (c as u32).checked_sub(0x100)? {
        n @ 0..=32 => Some(n as u8),
        n @ 33..=66 => Some((127 + n - 33) as u8),
        67 => Some(173),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{byte_token_value, gpt2_byte};
    use crate::testing::gpt2_byte_to_unicode;

    #[test]
    fn gpt2_alphabet_inverts_the_forward_map() {
        for (b, c) in gpt2_byte_to_unicode().into_iter().enumerate() {
            assert_eq!(gpt2_byte(c), Some(b as u8), "{c:?}");
        }
        assert_eq!(gpt2_byte('Ġ'), Some(b' ')); // U+0120
        assert_eq!(gpt2_byte('Ċ'), Some(b'\n')); // U+010A
        assert_eq!(gpt2_byte('\u{0143}'), Some(0xAD));
        assert_eq!(gpt2_byte('\u{0144}'), None);
        assert_eq!(gpt2_byte(' '), None);
        assert_eq!(gpt2_byte('▁'), None);
    }

    #[test]
    fn byte_tokens_parse_exactly() {
        assert_eq!(byte_token_value("<0x0A>"), Some(0x0A));
        assert_eq!(byte_token_value("<0xff>"), Some(0xFF));
        for bad in ["<0x+1>", "<0xA>", "<0x0AB>", "0x0A", "<0x0A", "<0xGG>"] {
            assert_eq!(byte_token_value(bad), None, "{bad}");
        }
    }
}
