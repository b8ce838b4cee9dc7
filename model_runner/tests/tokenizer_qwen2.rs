//! Tokenizer against the real Qwen2.5-Coder-0.5B-Instruct GGUF (skipped when absent).

mod common;

use common::{load_tokenizer, QWEN25_CODER, TRICKY};

/// Extra strings beyond `common::TRICKY`: Qwen2.5's user-defined tool-call tokens, the
/// case-insensitive contractions of its regex, and a decomposed accent (NFC-normalised).
const EXTRA: &[&str] = &["<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "IT'S DON'T", "cafe\u{301}"];

/// Expected ids for `TRICKY` followed by `EXTRA` (add_special_tokens = false). Obtained from
/// two references built from this GGUF's tokens/merges/token types (read with Python `gguf`
/// 0.19): Python `tokenizers` 0.23 configured like Qwen2.5's tokenizer.json (NFC; Split on the
/// qwen2 regex, Isolated; ByteLevel without regex; type 3 as special and type 4 as non-special
/// added tokens), and an independent pure-Python byte-level BPE. Both agreed on every string.
const EXPECTED_IDS: &[&[u32]] = &[
    &[9707, 1879],
    &[16, 17, 18, 19, 20],
    &[147579],
    &[924, 58858],
    &[785, 1042, 220, 17, 15, 17, 19, 1030, 220, 18, 21, 21, 2849, 13],
    &[1056, 825, 198, 1056, 1378, 271, 408],
    &[58149, 84686, 49600, 197],
    &[35673, 256, 12621, 262, 1588],
    &[101059, 102819, 15767, 56833, 61803, 70534],
    &[104811, 81705, 3837, 30844, 27442, 1773],
    &[151644, 872, 198, 13048, 1052, 0, 151645, 198],
    &[220, 6388, 323, 27748, 256],
    &[40, 2776, 2704, 432, 594, 220, 18, 13, 16, 19, 11, 4436, 944, 432, 30],
    &[3376, 37572, 586, 94872, 1021, 1959, 1036, 53282, 854, 11162, 99, 222, 145836],
    &[8822, 1887, 368, 341, 262, 13751, 17223, 6023, 797, 532],
    &[871],
    &[151657, 198, 4913, 606, 788, 330, 69, 16707, 151658],
    &[952, 13272, 44273, 17323],
    &[924, 58858],
];

#[test]
fn metadata_and_special_ids() {
    let Some(tok) = load_tokenizer(QWEN25_CODER) else {
        return;
    };
    // 151665 real tokens padded with [PADn] (type 5) to the 151936 embedding rows.
    assert_eq!(tok.vocab_size, 151_936);
    assert_eq!(tok.token_id("<|endoftext|>"), Some(151_643));
    assert_eq!(tok.token_id("<|im_start|>"), Some(151_644));
    assert_eq!(tok.token_id("<|im_end|>"), Some(151_645));
    assert_eq!(tok.bos_token_id, Some(151_643));
    assert!(!tok.add_bos_token);
    assert_eq!(tok.eos_token_ids, vec![151_645, 151_643]);
    assert!(tok.is_special(151_643) && tok.is_special(151_659));
    // <tool_call> is user-defined: matched whole, not special.
    assert_eq!(tok.token_id("<tool_call>"), Some(151_657));
    assert!(!tok.is_special(151_657));
    assert_eq!(tok.id_to_token(151_935).as_deref(), Some("[PAD151935]"));
}

#[test]
fn ids_match_reference() {
    let Some(tok) = load_tokenizer(QWEN25_CODER) else {
        return;
    };
    let texts: Vec<&str> = TRICKY.iter().chain(EXTRA).copied().collect();
    assert_eq!(texts.len(), EXPECTED_IDS.len());
    for (text, want) in texts.iter().zip(EXPECTED_IDS) {
        assert_eq!(tok.encode(text, false).unwrap(), *want, "ids of {text:?}");
        assert_eq!(tok.encode(text, true).unwrap(), *want, "no BOS for qwen2: {text:?}");
    }
}

#[test]
fn round_trips_and_skip_special() {
    let Some(tok) = load_tokenizer(QWEN25_CODER) else {
        return;
    };
    for text in TRICKY.iter().chain(&EXTRA[..2]) {
        let ids = tok.encode(text, false).unwrap();
        assert_eq!(tok.decode(&ids, false).unwrap(), *text, "round trip of {text:?}");
    }
    let ids = tok.encode("<|im_start|>assistant\n<tool_call>\n{}\n</tool_call><|im_end|>", false).unwrap();
    // Control tokens are dropped, user-defined tool-call markers kept (as HF does).
    assert_eq!(tok.decode(&ids, true).unwrap(), "assistant\n<tool_call>\n{}\n</tool_call>");
}
