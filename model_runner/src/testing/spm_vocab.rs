//! A tiny SentencePiece vocabulary (`tokenizer.ggml.model = "llama"`) in the GGUF layout
//! llama.cpp's converter writes for Llama 2: `<unk>`, `<s>`, `</s>` at ids 0..3, the 256 byte
//! tokens `<0x00>`..`<0xFF>` at 3..259, then the scored pieces, one control and one
//! user-defined token, padded with unused tokens to [`TINY_VOCAB_SIZE`] so that it also fits
//! the tiny models' embedding rows (pass it as `TinyModelSpec::extra_metadata`).
//!
//! Characters outside [`SPM_PIECES`] (`ñ`, emoji, most CJK) take the byte fallback.

use candle_core::quantized::gguf_file::Value;

use super::TINY_VOCAB_SIZE;
use crate::tokenizer::token_type;

/// Id of the first byte token `<0x00>`; byte `b` is `SPM_FIRST_BYTE_ID + b`.
pub const SPM_FIRST_BYTE_ID: u32 = 3;

/// The pieces after the byte tokens, in id order, with their scores: SentencePiece joins the
/// adjacent pair whose concatenation scores highest. Every piece of several characters splits
/// into two shorter pieces, so each can be reached by merging.
pub const SPM_PIECES: &[(&str, f32)] = &[
    ("▁t", -1.0),
    ("he", -2.0),
    ("▁the", -3.0),
    ("ll", -4.0),
    ("▁H", -5.0),
    ("▁w", -6.0),
    ("or", -7.0),
    ("ld", -8.0),
    ("▁wor", -9.0),
    ("▁world", -10.0),
    ("▁He", -11.0),
    ("▁Hell", -12.0),
    ("▁Hello", -13.0),
    ("▁▁", -14.0),
    ("▁▁▁▁", -15.0),
    ("in", -16.0),
    ("▁in", -17.0),
    ("th", -18.0),
    ("lo", -19.0),
    ("日本", -20.0),
    ("▁", -100.0),
    ("e", -101.0),
    ("t", -102.0),
    ("h", -103.0),
    ("l", -104.0),
    ("o", -105.0),
    ("r", -106.0),
    ("d", -107.0),
    ("w", -108.0),
    ("H", -109.0),
    ("i", -110.0),
    ("n", -111.0),
    ("a", -112.0),
    ("s", -113.0),
    (",", -114.0),
    (".", -115.0),
    ("!", -116.0),
    ("é", -117.0),
    ("日", -118.0),
    ("本", -119.0),
];

/// A control token: matched whole in text, dropped by `decode(.., skip_special_tokens)`.
pub const SPM_CONTROL: &str = "<start_of_turn>";
/// A user-defined token: matched whole in text and kept on decode.
pub const SPM_USER_DEFINED: &str = "<tool_call>";

/// The tokenizer metadata entries of the tiny SentencePiece vocabulary. `add_space_prefix` is
/// `tokenizer.ggml.add_space_prefix` (true for Llama 2 and Mistral, false for Gemma).
pub fn spm_tokenizer_metadata(add_space_prefix: bool) -> Vec<(String, Value)> {
    let mut tokens: Vec<(String, f32, i32)> = vec![
        ("<unk>".into(), 0.0, token_type::UNKNOWN),
        ("<s>".into(), 0.0, token_type::CONTROL),
        ("</s>".into(), 0.0, token_type::CONTROL),
    ];
    tokens.extend((0..=255u8).map(|b| (format!("<0x{b:02X}>"), 0.0, token_type::BYTE)));
    tokens.extend(SPM_PIECES.iter().map(|&(p, s)| (p.to_string(), s, token_type::NORMAL)));
    tokens.push((SPM_CONTROL.into(), 0.0, token_type::CONTROL));
    tokens.push((SPM_USER_DEFINED.into(), 0.0, token_type::USER_DEFINED));
    while tokens.len() < TINY_VOCAB_SIZE {
        let i = tokens.len();
        tokens.push((format!("<unused{i}>"), 0.0, token_type::UNUSED));
    }

    let array = |f: &dyn Fn(&(String, f32, i32)) -> Value| Value::Array(tokens.iter().map(f).collect());
    vec![
        ("tokenizer.ggml.model".into(), Value::String("llama".into())),
        ("tokenizer.ggml.pre".into(), Value::String("default".into())),
        ("tokenizer.ggml.tokens".into(), array(&|t| Value::String(t.0.clone()))),
        ("tokenizer.ggml.scores".into(), array(&|t| Value::F32(t.1))),
        ("tokenizer.ggml.token_type".into(), array(&|t| Value::I32(t.2))),
        ("tokenizer.ggml.unknown_token_id".into(), Value::U32(0)),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(true)),
        ("tokenizer.ggml.add_eos_token".into(), Value::Bool(false)),
        ("tokenizer.ggml.add_space_prefix".into(), Value::Bool(add_space_prefix)),
    ]
}
