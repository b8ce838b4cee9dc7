//! The SentencePiece tokenizer on the real Gemma 3 270M GGUF (skipped when the file is absent:
//! `scripts/fetch-model gemma3-270m`), against llama.cpp's llama-tokenize id for id.
//!
//! The expected ids are in tests/fixtures/gemma3_tokenize.json, written by
//! `scripts/gen-tokenize-fixture --llama-bin DIR` (llama-tokenize on this GGUF, each text
//! verbatim, with and without the BOS the model asks for, special tokens parsed as the engine's
//! `encode` always does). The texts are listed in that script.

mod common;

use std::time::Instant;

use entrobatch_model_runner::tokenizer::{token_type, Tokenizer, VocabKind};
use serde::Deserialize;

const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

#[derive(Deserialize)]
struct Fixture {
    model: String,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
    ids_with_bos: Vec<u32>,
}

fn fixture() -> Fixture {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gemma3_tokenize.json");
    let text = std::fs::read_to_string(path).expect("fixture");
    serde_json::from_str(&text).expect("fixture JSON")
}

fn load() -> Option<Tokenizer> {
    let path = common::model_path(GEMMA3)?;
    let content = common::read_content(&path);
    let start = Instant::now();
    let tok = Tokenizer::from_gguf(&content).unwrap();
    // Printed, not asserted: a debug build is several times slower than the release build
    // that loads models for real.
    eprintln!("Gemma 3 tokenizer built in {:.2?}", start.elapsed());
    Some(tok)
}

#[test]
fn metadata_and_special_ids() {
    let Some(tok) = load() else { return };
    assert_eq!(tok.vocab_kind(), VocabKind::SentencePiece);
    assert_eq!(tok.vocab_size, 262_144);
    assert_eq!((tok.bos_token_id, tok.add_bos_token), (Some(2), true));
    let end_of_turn = tok.token_id("<end_of_turn>").unwrap();
    // <eos> from the file, then the chat format's end of turn.
    assert_eq!(tok.eos_token_ids, vec![1, end_of_turn]);
    assert!(tok.is_special(0) && tok.is_special(end_of_turn));
    // The whitespace runs and HTML tags are user-defined: matched whole, kept on decode.
    for ud in ["\n\n", "  ", "<b>", "[multimodal]"] {
        let id = tok.token_id(ud).unwrap();
        assert_eq!(tok.token_type(id), Some(token_type::USER_DEFINED), "{ud:?}");
        assert!(!tok.is_special(id));
    }
}

#[test]
fn ids_match_llama_tokenize() {
    let fixture = fixture();
    assert_eq!(fixture.model, GEMMA3);
    let Some(tok) = load() else { return };
    let mut mismatches = Vec::new();
    for case in &fixture.cases {
        let ids = tok.encode(&case.text, false).unwrap();
        if ids != case.ids {
            mismatches.push(format!("{:?}\n  llama.cpp {:?}\n  ours      {:?}", case.text, case.ids, ids));
        }
        let with_bos = tok.encode(&case.text, true).unwrap();
        if with_bos != case.ids_with_bos {
            mismatches.push(format!(
                "{:?} with BOS\n  llama.cpp {:?}\n  ours      {with_bos:?}",
                case.text, case.ids_with_bos
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} cases differ:\n{}",
        mismatches.len(),
        fixture.cases.len(),
        mismatches.join("\n")
    );
}

#[test]
fn decode_and_token_bytes_give_back_the_text() {
    let Some(tok) = load() else { return };
    for case in fixture().cases {
        let text = case.text.as_str();
        // With no space prefix (Gemma) decoding gives back the text exactly, special tokens
        // written in it included, except that a `▁` written in the text was read as a space
        // (llama.cpp reads it so too: the fixture has the space's id).
        let expected = text.replace('\u{2581}', " ");
        assert_eq!(tok.decode(&case.ids, false).unwrap(), expected, "{text:?}");
        assert_eq!(tok.decode(&case.ids_with_bos, false).unwrap(), format!("<bos>{expected}"), "{text:?} with BOS");
        let controls: Vec<String> =
            case.ids.iter().filter(|&&id| tok.is_special(id)).filter_map(|&id| tok.id_to_token(id)).collect();
        let without_controls = controls.iter().fold(expected.clone(), |t, c| t.replacen(c.as_str(), "", 1));
        assert_eq!(tok.decode(&case.ids_with_bos, true).unwrap(), without_controls, "{text:?} skipping specials");
        // Token bytes spell the text wherever it has no control tokens.
        if controls.is_empty() {
            let spelled: Vec<u8> = case.ids.iter().flat_map(|&id| tok.token_bytes(id).unwrap()).collect();
            assert_eq!(spelled, expected.as_bytes(), "{text:?}");
        }
    }
}
