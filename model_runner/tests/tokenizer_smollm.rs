//! Tokenizer against the real SmolLM2-135M-Instruct GGUF (skipped when the file is absent).

mod common;

use common::{load_tokenizer, SMOLLM2, TRICKY};

/// Expected ids for `common::TRICKY`, in order (encode with add_special_tokens = false).
/// Obtained from two references built from this GGUF's own tokens/merges/token types
/// (read with Python `gguf` 0.19): (1) Python `tokenizers` 0.23 configured like SmolLM2's
/// tokenizer.json (BPE; Sequence[Digits(individual), ByteLevel(no prefix space, regex)];
/// control tokens as special added tokens), and (2) an independent pure-Python byte-level BPE
/// (`regex` module split + merge ranks). Both agreed on every string.
const EXPECTED_IDS: &[&[u32]] = &[
    &[19556, 905],
    &[33, 34, 35, 36, 37],
    &[10813, 116, 218],
    &[83, 1939, 2756],
    &[504, 713, 216, 34, 32, 34, 36, 761, 216, 35, 38, 38, 2009, 30],
    &[1311, 582, 198, 1311, 827, 198, 198, 486],
    &[197, 15999, 197, 19509, 483, 197],
    &[30404, 256, 5600, 333, 1535],
    &[23274, 115, 40993, 179, 120, 248, 26453, 11100, 224, 10391, 251, 10391, 134, 11100, 226],
    &[28589, 29184, 43222, 229, 16313, 239, 12831, 46781, 44083, 19076],
    &[1, 4093, 198, 26843, 665, 17, 2, 198],
    &[216, 2899, 284, 35079, 256],
    &[57, 5248, 2090, 357, 506, 216, 35, 30, 33, 36, 28, 3247, 982, 357, 47],
    &[3546, 46494, 40852, 1841, 619, 385, 2346, 573, 15107, 116, 218, 10813, 244, 218],
    &[7853, 1085, 1000, 1662, 472, 1628, 34115, 17, 1470, 6004, 21646, 198, 109, 198],
    &[18682],
];

#[test]
fn metadata_and_special_ids() {
    let Some(tok) = load_tokenizer(SMOLLM2) else {
        return;
    };
    assert_eq!(tok.vocab_size, 49152);
    assert_eq!(tok.tokenizer.get_vocab_size(true), 49152, "added tokens must reuse vocab ids");
    assert_eq!(tok.token_id("<|endoftext|>"), Some(0));
    assert_eq!(tok.token_id("<|im_start|>"), Some(1));
    assert_eq!(tok.token_id("<|im_end|>"), Some(2));
    // SmolLM2's GGUF names <|im_start|> as BOS and <|im_end|> as EOS, with add_bos false.
    assert_eq!(tok.bos_token_id, Some(1));
    assert!(!tok.add_bos_token);
    assert_eq!(tok.eos_token_ids, vec![2, 0]);
    assert!(tok.chat_template.as_deref().is_some_and(|t| t.contains("<|im_start|>")));
    // Ids 0..=16 are control tokens (<|endoftext|> .. <empty_output>), the rest normal.
    assert!((0..17).all(|id| tok.is_special(id)));
    assert!(!tok.is_special(17) && !tok.is_special(905));
    assert_eq!(tok.id_to_token(905).as_deref(), Some("Ġworld"));
    assert_eq!(tok.id_to_token(49152), None);
    assert_eq!(tok.token_id("<|not_a_token|>"), None);
}

#[test]
fn ids_match_reference() {
    let Some(tok) = load_tokenizer(SMOLLM2) else {
        return;
    };
    assert_eq!(TRICKY.len(), EXPECTED_IDS.len());
    for (text, want) in TRICKY.iter().zip(EXPECTED_IDS) {
        assert_eq!(tok.encode(text, false).unwrap(), *want, "ids of {text:?}");
        // No BOS for this model even when special tokens are requested.
        assert_eq!(tok.encode(text, true).unwrap(), *want, "ids of {text:?} (add_special_tokens)");
    }
}

#[test]
fn hello_world_and_digits() {
    let Some(tok) = load_tokenizer(SMOLLM2) else {
        return;
    };
    let ids = tok.encode("Hello world", false).unwrap();
    assert_eq!(ids, vec![tok.token_id("Hello").unwrap(), tok.token_id("Ġworld").unwrap()]);
    let digits = tok.encode("12345", false).unwrap();
    assert_eq!(digits.len(), 5);
    for (id, d) in digits.iter().zip("12345".chars()) {
        assert_eq!(tok.id_to_token(*id).unwrap(), d.to_string());
    }
}

#[test]
fn round_trips() {
    let Some(tok) = load_tokenizer(SMOLLM2) else {
        return;
    };
    for text in TRICKY {
        let ids = tok.encode(text, false).unwrap();
        assert_eq!(tok.decode(&ids, false).unwrap(), *text, "round trip of {text:?}");
    }
    // Byte-level: an emoji is split into byte tokens, none of which decodes alone.
    let crab = tok.encode("🦀", false).unwrap();
    assert!(crab.len() > 1);
    assert_eq!(tok.decode(&crab, false).unwrap(), "🦀");
}

/// SmolLM2's vocabulary has no byte token for 0x04, 0x06, 0x13, 0x14, 0x16 or 0x1D (nor for 0xC0,
/// 0xC1, 0xF1, 0xF2, 0xF5..=0xFF, which only unassigned planes or invalid UTF-8 use). Hugging
/// Face's BPE (no unknown token, no byte fallback) drops those characters, and so do we; the
/// pre-tokenizer still splits the text around them, so "a\x04b" spells "a" and "b" apart.
/// (Found by the detokenizer fuzz target.)
#[test]
fn bytes_missing_from_the_vocabulary_are_dropped_like_hf() {
    let Some(tok) = load_tokenizer(SMOLLM2) else {
        return;
    };
    for missing in ['\u{4}', '\u{6}', '\u{13}', '\u{14}', '\u{16}', '\u{1d}'] {
        assert_eq!(tok.encode(&missing.to_string(), false).unwrap(), Vec::<u32>::new(), "{missing:?}");
        let with = tok.encode(&format!("a{missing}b"), false).unwrap();
        let apart = [tok.encode("a", false).unwrap(), tok.encode("b", false).unwrap()].concat();
        assert_eq!(with, apart, "{missing:?}");
        assert_eq!(tok.decode(&with, false).unwrap(), "ab");
    }
    // Its neighbours 0x03 and 0x05 do have byte tokens.
    assert_eq!(tok.encode("\u{3}\u{5}", false).unwrap().len(), 2);
}

#[test]
fn specials_in_text_and_skip_on_decode() {
    let Some(tok) = load_tokenizer(SMOLLM2) else {
        return;
    };
    let ids = tok.encode("<|im_start|>assistant\nHi<|im_end|>", false).unwrap();
    assert_eq!(ids.first(), Some(&1));
    assert_eq!(ids.last(), Some(&2));
    assert_eq!(tok.decode(&ids, true).unwrap(), "assistant\nHi");
    assert_eq!(tok.decode(&ids, false).unwrap(), "<|im_start|>assistant\nHi<|im_end|>");
    // A special token's text glued to words still matches as a unit.
    let glued = tok.encode("x<|endoftext|>y", false).unwrap();
    assert_eq!(glued, vec![tok.token_id("x").unwrap(), 0, tok.token_id("y").unwrap()]);
}
