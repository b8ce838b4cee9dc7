//! Tokenizer on edited tiny-model metadata: pre-tokenizer table, token types, errors.

mod common;

use std::collections::HashMap;

use candle_core::quantized::gguf_file::{Content, Value};
use entrobatch_model_runner::testing::{unique_test_path, write_tiny_gguf, TinyModelSpec};
use entrobatch_model_runner::tokenizer::{Tokenizer, TokenizerError};
use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

/// The tiny llama model's metadata, edited by `edit`.
fn content_with(name: &str, edit: impl FnOnce(&mut HashMap<String, Value>)) -> Content {
    let path = unique_test_path(env!("CARGO_TARGET_TMPDIR"), &format!("tokvar-{name}.gguf"));
    write_tiny_gguf(&path, &TinyModelSpec::llama()).unwrap();
    let mut c = common::read_content(&path);
    let _ = std::fs::remove_file(&path);
    edit(&mut c.metadata);
    c
}

fn with_pre(pre: &str) -> Result<Tokenizer, TokenizerError> {
    Tokenizer::from_gguf(&content_with(&format!("pre-{pre}"), |md| {
        md.insert("tokenizer.ggml.pre".into(), Value::String(pre.into()));
    }))
}

fn pieces(tok: &Tokenizer, text: &str) -> Vec<String> {
    let mut pts = PreTokenizedString::from(text);
    tok.tokenizer.get_pre_tokenizer().unwrap().pre_tokenize(&mut pts).unwrap();
    pts.get_splits(OffsetReferential::Original, OffsetType::Byte).into_iter().map(|(s, _, _)| s.to_string()).collect()
}

const PRE_INPUT: &str = "Hello  world!\n\n  x = 12345;\tIT'S ok 🦀";

/// Expected splits of PRE_INPUT from Python `tokenizers` 0.23 `pre_tokenize_str`, with the
/// pre-tokenizers of the HF tokenizer.json of SmolLM2, Qwen2.5, Llama 3 and GPT-2.
const EXPECTED_PIECES: &[(&str, &[&str])] = &[
    (
        "smollm",
        &[
            "Hello",
            "Ġ",
            "Ġworld",
            "!",
            "ĊĊĠ",
            "Ġx",
            "Ġ=",
            "Ġ",
            "1",
            "2",
            "3",
            "4",
            "5",
            ";",
            "ĉ",
            "IT",
            "'",
            "S",
            "Ġok",
            "ĠðŁ¦Ģ",
        ],
    ),
    (
        "qwen2",
        &[
            "Hello",
            "Ġ",
            "Ġworld",
            "!ĊĊ",
            "Ġ",
            "Ġx",
            "Ġ=",
            "Ġ",
            "1",
            "2",
            "3",
            "4",
            "5",
            ";",
            "ĉIT",
            "'S",
            "Ġok",
            "ĠðŁ¦Ģ",
        ],
    ),
    (
        "llama-bpe",
        &["Hello", "Ġ", "Ġworld", "!ĊĊ", "Ġ", "Ġx", "Ġ=", "Ġ", "123", "45", ";", "ĉIT", "'S", "Ġok", "ĠðŁ¦Ģ"],
    ),
    ("default", &["Hello", "Ġ", "Ġworld", "!", "ĊĊĠ", "Ġx", "Ġ=", "Ġ12345", ";", "ĉ", "IT", "'", "S", "Ġok", "ĠðŁ¦Ģ"]),
];

#[test]
fn pre_tokenizers_match_hf() {
    for (pre, want) in EXPECTED_PIECES {
        let tok = with_pre(pre).unwrap();
        assert_eq!(pieces(&tok, PRE_INPUT), *want, "pre = {pre}");
        assert_eq!(tok.decode(&tok.encode(PRE_INPUT, false).unwrap(), false).unwrap(), PRE_INPUT);
    }
    // Absent pre behaves as "default".
    let tok = Tokenizer::from_gguf(&content_with("pre-absent", |md| {
        md.remove("tokenizer.ggml.pre");
    }))
    .unwrap();
    assert_eq!(pieces(&tok, PRE_INPUT), EXPECTED_PIECES[3].1);
}

#[test]
fn qwen2_normalizes_to_nfc() {
    let qwen = with_pre("qwen2").unwrap();
    let smol = with_pre("smollm").unwrap();
    let (composed, decomposed) = ("caf\u{e9}", "cafe\u{301}");
    assert_eq!(qwen.encode(decomposed, false).unwrap(), qwen.encode(composed, false).unwrap());
    assert_ne!(smol.encode(decomposed, false).unwrap(), smol.encode(composed, false).unwrap());
}

#[test]
fn unsupported_inputs_are_clear_errors() {
    let err = with_pre("deepseek-llm-xyz").err().unwrap();
    assert!(matches!(&err, TokenizerError::Unsupported(m) if m.contains("deepseek-llm-xyz")), "{err}");

    let spm = content_with("spm", |md| {
        md.insert("tokenizer.ggml.model".into(), Value::String("llama".into()));
    });
    let err = Tokenizer::from_gguf(&spm).err().unwrap();
    assert!(matches!(&err, TokenizerError::Unsupported(m) if m.contains("SentencePiece")), "{err}");

    let no_tokens = content_with("no-tokens", |md| {
        md.remove("tokenizer.ggml.tokens");
    });
    assert!(matches!(Tokenizer::from_gguf(&no_tokens), Err(TokenizerError::MissingMetadata(_))));

    let bad_eos = content_with("bad-eos", |md| {
        md.insert("tokenizer.ggml.eos_token_id".into(), Value::U32(100_000));
    });
    assert!(matches!(Tokenizer::from_gguf(&bad_eos), Err(TokenizerError::MissingMetadata(_))));

    let bad_merge = content_with("bad-merge", |md| {
        md.insert("tokenizer.ggml.merges".into(), Value::Array(vec![Value::String("nospace".into())]));
    });
    assert!(matches!(Tokenizer::from_gguf(&bad_merge), Err(TokenizerError::MissingMetadata(_))));

    let wrong_type = content_with("wrong-type", |md| {
        md.insert("tokenizer.ggml.add_bos_token".into(), Value::U32(1));
    });
    assert!(matches!(Tokenizer::from_gguf(&wrong_type), Err(TokenizerError::MissingMetadata(_))));
}

#[test]
fn user_defined_tokens_match_whole_but_survive_skip_special() {
    // Turn the last [PAD] filler into a user-defined token, as llama.cpp writes Qwen2.5's
    // `<tool_call>` (an HF added token with special = false).
    let c = content_with("user-defined", |md| {
        let Value::Array(tokens) = md.get_mut("tokenizer.ggml.tokens").unwrap() else { panic!() };
        let last = tokens.len() - 1;
        tokens[last] = Value::String("<tool_call>".into());
        let Value::Array(types) = md.get_mut("tokenizer.ggml.token_type").unwrap() else { panic!() };
        types[last] = Value::I32(4);
    });
    let tok = Tokenizer::from_gguf(&c).unwrap();
    let id = tok.token_id("<tool_call>").unwrap();
    let ids = tok.encode("a<tool_call>b", false).unwrap();
    assert_eq!(ids, vec![tok.token_id("a").unwrap(), id, tok.token_id("b").unwrap()]);
    assert!(!tok.is_special(id));
    assert_eq!(tok.decode(&ids, true).unwrap(), "a<tool_call>b");
}
