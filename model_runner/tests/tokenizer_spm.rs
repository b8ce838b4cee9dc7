//! SentencePiece vocabularies from GGUF metadata, on the tiny generated vocabulary
//! (`testing::spm_tokenizer_metadata`): merges by score, the space prefix, byte fallback,
//! added tokens, BOS/EOS, decoding and the bytes each token stands for.
//!
//! The expected ids follow llama.cpp's `llm_tokenizer_spm` by hand (join the adjacent pair
//! whose concatenation scores highest, leftmost first; bytes for what no piece covers); the
//! ids of the real Gemma 3 vocabulary are checked against llama-tokenize itself in
//! tokenizer_gemma3.rs.

mod common;

use std::collections::HashMap;

use candle_core::quantized::gguf_file::{Content, Value, VersionedMagic};
use entrobatch_model_runner::testing::{
    spm_tokenizer_metadata, unique_test_path, write_tiny_gguf, TinyModelSpec, SPM_CONTROL, SPM_FIRST_BYTE_ID,
    SPM_USER_DEFINED, TINY_VOCAB_SIZE,
};
use entrobatch_model_runner::tokenizer::{Tokenizer, TokenizerError, VocabKind};

fn content(md: HashMap<String, Value>) -> Content {
    Content { magic: VersionedMagic::GgufV3, metadata: md, tensor_infos: HashMap::new(), tensor_data_offset: 0 }
}

fn spm_with(
    add_space_prefix: bool,
    edit: impl FnOnce(&mut HashMap<String, Value>),
) -> Result<Tokenizer, TokenizerError> {
    let mut md: HashMap<String, Value> = spm_tokenizer_metadata(add_space_prefix).into_iter().collect();
    edit(&mut md);
    Tokenizer::from_gguf(&content(md))
}

fn spm(add_space_prefix: bool) -> Tokenizer {
    spm_with(add_space_prefix, |_| {}).unwrap()
}

/// The ids of vocabulary pieces, written as their text.
fn ids(tok: &Tokenizer, pieces: &[&str]) -> Vec<u32> {
    pieces.iter().map(|p| tok.token_id(p).unwrap_or_else(|| panic!("{p:?} is not a piece"))).collect()
}

fn byte(b: u8) -> u32 {
    SPM_FIRST_BYTE_ID + b as u32
}

#[test]
fn pieces_join_by_score_after_the_space_prefix() {
    let tok = spm(true);
    let cases: &[(&str, &[&str])] = &[
        ("Hello world", &["▁Hello", "▁world"]),
        // "▁t" (-1) joins before "th" (-18) could, so the word ends as one piece.
        ("the", &["▁the"]),
        ("Hello  world", &["▁Hello", "▁", "▁world"]),
        // "▁▁" (-14) outranks "in" (-16), and "▁▁in" is no piece.
        (" in", &["▁▁", "in"]),
        ("   ", &["▁▁▁▁"]),
        ("in the", &["▁in", "▁the"]),
    ];
    for (text, pieces) in cases {
        assert_eq!(tok.encode(text, false).unwrap(), ids(&tok, pieces), "{text:?}");
    }
}

#[test]
fn without_the_space_prefix_text_starts_bare() {
    let tok = spm(false);
    let cases: &[(&str, &[&str])] = &[
        ("Hello world", &["H", "e", "ll", "o", "▁world"]),
        // Without the prefix "he" (-2) joins first and "the" is no piece.
        ("the", &["t", "he"]),
        (" in", &["▁in"]),
    ];
    for (text, pieces) in cases {
        assert_eq!(tok.encode(text, false).unwrap(), ids(&tok, pieces), "{text:?}");
    }
}

#[test]
fn characters_outside_the_pieces_fall_back_to_bytes() {
    let tok = spm(true);
    let space = tok.token_id("▁").unwrap();
    assert_eq!(tok.encode("ñ", false).unwrap(), [space, byte(0xC3), byte(0xB1)]);
    // 語 (U+8A9E) is no piece; 日本 is.
    assert_eq!(
        tok.encode("日本語", false).unwrap(),
        [space, tok.token_id("日本").unwrap(), byte(0xE8), byte(0xAA), byte(0x9E)]
    );
    assert_eq!(tok.encode("🦀", false).unwrap(), [space, byte(0xF0), byte(0x9F), byte(0xA6), byte(0x80)]);
    assert_eq!(tok.encode("\n", false).unwrap(), [space, byte(b'\n')]);
}

#[test]
fn decode_round_trips_and_drops_only_the_prefixed_space() {
    let texts = ["Hello world", " Hello", "Hello  world ", "the in the", "ñ 日本語 🦀", "a\nb\t", "   ", ""];
    for prefix in [true, false] {
        let tok = spm(prefix);
        for text in texts {
            let ids = tok.encode(text, false).unwrap();
            assert_eq!(tok.decode(&ids, false).unwrap(), text, "prefix {prefix}: {text:?}");
            let with_bos = tok.encode(text, true).unwrap();
            assert_eq!(tok.decode(&with_bos, true).unwrap(), text, "prefix {prefix}, BOS skipped: {text:?}");
        }
    }
    // Only the first token's space goes: later tokens keep theirs.
    let tok = spm(true);
    assert_eq!(tok.decode(&ids(&tok, &["▁Hello", "▁world"]), false).unwrap(), "Hello world");
    assert_eq!(tok.decode(&ids(&tok, &["▁world"]), false).unwrap(), "world");
    assert_eq!(spm(false).decode(&ids(&tok, &["▁world"]), false).unwrap(), " world");
}

#[test]
fn added_tokens_are_matched_whole_and_each_stretch_after_them_gets_the_prefix() {
    let text = format!("{SPM_CONTROL}in{SPM_USER_DEFINED}in");
    let with_prefix = spm(true);
    let (ctrl, ud) = (with_prefix.token_id(SPM_CONTROL).unwrap(), with_prefix.token_id(SPM_USER_DEFINED).unwrap());
    let in_ = with_prefix.token_id("in").unwrap();
    let space_in = with_prefix.token_id("▁in").unwrap();
    // llama.cpp puts the prefix before every stretch of text that follows a special or
    // user-defined token.
    assert_eq!(with_prefix.encode(&text, false).unwrap(), [ctrl, space_in, ud, space_in]);
    assert_eq!(with_prefix.decode(&[ctrl, space_in, ud, space_in], true).unwrap(), "in<tool_call> in");
    let bare = spm(false);
    assert_eq!(bare.encode(&text, false).unwrap(), [ctrl, in_, ud, in_]);
    assert_eq!(bare.decode(&[ctrl, in_, ud, in_], false).unwrap(), text);
    assert_eq!(bare.decode(&[ctrl, in_, ud, in_], true).unwrap(), format!("in{SPM_USER_DEFINED}in"));
    assert!(bare.is_special(ctrl) && !bare.is_special(ud));
    // <unk> is special as in llama.cpp: matched in text, dropped on decode.
    assert_eq!(bare.encode("<unk>", false).unwrap(), [0]);
    assert!(bare.is_special(0));
    assert_eq!(bare.decode(&[0, in_], true).unwrap(), "in");
}

#[test]
fn bos_and_eos_follow_the_metadata_with_llama_cpp_defaults() {
    let tok = spm(true);
    let space_in = tok.token_id("▁in").unwrap();
    assert_eq!((tok.bos_token_id, tok.eos_token_ids.as_slice(), tok.add_bos_token), (Some(1), &[2][..], true));
    assert_eq!(tok.encode("in", true).unwrap(), [1, space_in]);
    assert_eq!(tok.encode("in", false).unwrap(), [space_in]);
    // Without the keys: BOS yes, EOS no, space prefix yes (llama.cpp's SentencePiece defaults).
    let defaults = spm_with(false, |md| {
        md.remove("tokenizer.ggml.add_bos_token");
        md.remove("tokenizer.ggml.add_eos_token");
        md.remove("tokenizer.ggml.add_space_prefix");
    })
    .unwrap();
    assert!(defaults.add_bos_token);
    assert_eq!(defaults.encode("in", true).unwrap(), [1, space_in]);
    let no_bos_eos = spm_with(true, |md| {
        md.insert("tokenizer.ggml.add_bos_token".into(), Value::Bool(false));
        md.insert("tokenizer.ggml.add_eos_token".into(), Value::Bool(true));
    })
    .unwrap();
    assert_eq!(no_bos_eos.encode("in", true).unwrap(), [space_in, 2]);
    assert_eq!(no_bos_eos.encode("in", false).unwrap(), [space_in]);
}

#[test]
fn token_bytes_are_what_each_token_puts_into_text() {
    let tok = spm(true);
    assert_eq!(tok.vocab_kind(), VocabKind::SentencePiece);
    let bytes = |piece: &str| tok.token_bytes(tok.token_id(piece).unwrap());
    assert_eq!(bytes("▁Hello").as_deref(), Some(&b" Hello"[..]));
    assert_eq!(bytes("▁▁").as_deref(), Some(&b"  "[..]));
    assert_eq!(bytes("日本").as_deref(), Some("日本".as_bytes()));
    assert_eq!(bytes("<0xC3>").as_deref(), Some(&[0xC3][..]));
    assert_eq!(bytes(SPM_USER_DEFINED).as_deref(), Some(SPM_USER_DEFINED.as_bytes()));
    for no_text in ["<unk>", "<s>", "</s>", SPM_CONTROL, "<unused319>"] {
        assert_eq!(bytes(no_text), None, "{no_text}");
    }
    assert_eq!(tok.token_bytes(TINY_VOCAB_SIZE as u32), None);
    for id in 0..TINY_VOCAB_SIZE as u32 {
        let is_byte = (SPM_FIRST_BYTE_ID..SPM_FIRST_BYTE_ID + 256).contains(&id);
        assert_eq!(tok.is_byte_fallback(id), is_byte, "{id}");
    }

    // Every text token's bytes, concatenated, are the decode of the tokens (without the
    // prefix, whose decoder would drop the first space).
    let bare = spm(false);
    let text_ids: Vec<u32> = (0..TINY_VOCAB_SIZE as u32)
        .filter(|&id| !bare.is_byte_fallback(id) && bare.token_bytes(id).is_some())
        .collect();
    assert!(text_ids.len() > 40, "{} text tokens", text_ids.len());
    let spelled: Vec<u8> = text_ids.iter().flat_map(|&id| bare.token_bytes(id).unwrap()).collect();
    assert_eq!(bare.decode(&text_ids, false).unwrap().as_bytes(), spelled);
    for text in ["ñ 日本語 🦀", "Hello  world", "a\tb"] {
        let ids = bare.encode(text, false).unwrap();
        let spelled: Vec<u8> = ids.iter().flat_map(|&id| bare.token_bytes(id).unwrap()).collect();
        assert_eq!(spelled, text.as_bytes(), "{text:?}");
    }
}

#[test]
fn byte_level_token_bytes_use_the_gpt2_alphabet() {
    let path = unique_test_path(env!("CARGO_TARGET_TMPDIR"), "spm-bytelevel.gguf");
    write_tiny_gguf(&path, &TinyModelSpec::llama()).unwrap();
    let tok = Tokenizer::from_gguf(&common::read_content(&path)).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(tok.vocab_kind(), VocabKind::ByteLevel);
    let bytes = |piece: &str| tok.token_bytes(tok.token_id(piece).unwrap());
    assert_eq!(bytes("Ġworld").as_deref(), Some(&b" world"[..]));
    assert_eq!(bytes("Ċ").as_deref(), Some(&b"\n"[..]));
    assert_eq!(bytes("<|im_start|>"), None);
    assert!(!tok.is_byte_fallback(tok.token_id("Ċ").unwrap()));
    let text = "Hello world\n\n café";
    let spelled: Vec<u8> =
        tok.encode(text, false).unwrap().iter().flat_map(|&id| tok.token_bytes(id).unwrap()).collect();
    assert_eq!(spelled, text.as_bytes());
}

#[test]
fn a_tokenizer_json_with_byte_fallback_is_sentencepiece_too() {
    // The same tokenizer as a checkpoint's tokenizer.json would give it: no GGUF token types,
    // so the byte tokens are known by their `<0xAB>` names.
    let gguf = spm(true);
    let tok = Tokenizer::from_hf(gguf.tokenizer.clone(), Some(1), vec![2], None, true);
    assert_eq!(tok.vocab_kind(), VocabKind::SentencePiece);
    let bytes = |piece: &str| tok.token_bytes(tok.token_id(piece).unwrap());
    assert_eq!(bytes("<0xC3>").as_deref(), Some(&[0xC3][..]));
    assert_eq!(bytes("▁Hello").as_deref(), Some(&b" Hello"[..]));
    assert_eq!(bytes(SPM_CONTROL), None);
    assert!(tok.is_byte_fallback(byte(0xC3)) && !tok.is_byte_fallback(tok.token_id("▁Hello").unwrap()));
}

#[test]
fn fits_the_tiny_models() {
    // The vocabulary fills the tiny models' embedding rows, so a tiny model can carry it.
    let mut spec = TinyModelSpec::llama();
    spec.extra_metadata = spm_tokenizer_metadata(true);
    let path = unique_test_path(env!("CARGO_TARGET_TMPDIR"), "spm-tiny-model.gguf");
    write_tiny_gguf(&path, &spec).unwrap();
    let tok = Tokenizer::from_gguf(&common::read_content(&path)).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!((tok.vocab_kind(), tok.vocab_size), (VocabKind::SentencePiece, TINY_VOCAB_SIZE));
    assert_eq!(tok.encode("Hello world", false).unwrap(), ids(&tok, &["▁Hello", "▁world"]));
}

#[test]
fn malformed_sentencepiece_metadata_is_refused() {
    let err = spm_with(true, |md| {
        md.remove("tokenizer.ggml.scores");
    })
    .err()
    .unwrap();
    assert!(matches!(&err, TokenizerError::Unsupported(m) if m.contains("tokenizer.ggml.scores")), "{err}");
    let short = spm_with(true, |md| {
        md.insert("tokenizer.ggml.scores".into(), Value::Array(vec![Value::F32(0.0)]));
    });
    assert!(matches!(short, Err(TokenizerError::MissingMetadata(m)) if m.contains("1 entries")));
    let wrong_type = spm_with(true, |md| {
        md.insert("tokenizer.ggml.add_space_prefix".into(), Value::U8(1));
    });
    assert!(matches!(wrong_type, Err(TokenizerError::MissingMetadata(_))));
}
